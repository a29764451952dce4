-- 0_baseline with DP-SGD on every node: per-sample gradients clipped to norm 1, Gaussian noise
-- of 1.0 x the clip added to their sum; the Renyi-DP accountant records epsilon (for delta 1e-5)
-- in each node's metrics every round.
--   scripts/dpy run configs/1_private.lua [KEY=VALUE ...]
seed = 1
nodes = 16
graph = { "regular", degree = 4 }
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 25
actions = { { "differential_privacy", clip = 1.0, noise = 1.0, delta = 1e-5 } }
