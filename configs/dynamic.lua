-- D-PSGD on a dynamic topology: every round all nodes derive the same fresh random 4-regular graph
-- from the seed and the round number (no coordination), which mixes faster than a fixed graph.
seed = 1
nodes = 16
graph = { "dynamic", degree = 4 }
dataset = "fashion_mnist"
partition = "iid"
model = "cnn"
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 25
