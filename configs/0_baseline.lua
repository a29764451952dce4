-- The baseline decentralized run: 16 nodes on a random 4-regular graph, Fashion-MNIST split IID,
-- the cnn, 10 local steps of batch 32 per round, plain averaging (D-PSGD with
-- Metropolis-Hastings weights), 100 rounds.
--   scripts/dpy run configs/0_baseline.lua [processes=4] [KEY=VALUE ...]
seed = 1
nodes = 16
graph = { "regular", degree = 4 }
dataset = "fashion_mnist"
partition = "iid"
model = "cnn"
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 25   -- rounds; every node evaluates on the full test set
