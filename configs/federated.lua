-- Federated averaging: node 0 is the server, nodes 1..16 are clients holding IID shares of
-- Fashion-MNIST; each round the server sends the global model to half the clients (a seeded
-- sample), they train 10 local steps and send it back, and the server averages them weighted by
-- their sample counts. Only the server evaluates.
-- `scripts/dpy run configs/federated.lua "sharing={'topk',alpha=0.1}"`: the clients send a tenth of
-- their model (the coordinates of largest accumulated change; see README, Sparse sharing).
seed = 1
nodes = 17
algorithm = "fedavg"
fraction = 0.5
dataset = "fashion_mnist"
partition = "iid"
model = "cnn"
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 10
