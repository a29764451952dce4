-- 0_baseline with a robust aggregation: each node replaces its model by the coordinate-wise
-- trimmed mean of its own and its 4 neighbours' models, dropping the largest and the smallest
-- value of every coordinate (f = 1).
--   scripts/dpy run configs/2_robust.lua [KEY=VALUE ...]
seed = 1
nodes = 16
graph = { "regular", degree = 4 }
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 25
sharing = { "trimmed_mean", f = 1 }
