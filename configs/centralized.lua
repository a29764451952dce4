-- One node trains the cnn on Fashion-MNIST: the reference for every decentralized run.
-- scripts/dpy run configs/centralized.lua [--seed N] [KEY=VALUE ...]
seed = 1
dataset = "fashion_mnist"
model = "cnn"
optimizer = { "sgd", lr = 0.01, momentum = 0.9 }
batch_size = 32
epochs = 2
eval_every = 500   -- steps; each evaluation on the full test set is one metrics round
