-- 2_robust under attack: 3 of the 16 nodes (a seeded choice, recorded in manifest.json) train on
-- flipped labels (y -> 9 - y). For contrast, the same attack under plain averaging:
--   scripts/dpy run configs/3_robust_poisoned.lua sharing=average
seed = 1
nodes = 16
graph = { "regular", degree = 4 }
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 25
sharing = { "trimmed_mean", f = 2 }
actions = { { "label_flipping", fraction = 3 / 16 } }
