-- 0_baseline with a robust aggregation: each node replaces its model by the coordinate-wise
-- trimmed mean of its own and its 4 neighbours' models, dropping the 2 largest and the 2 smallest
-- values of every coordinate (f = 2: with 5 models, the median). f = 2 because on a random
-- 4-regular graph some nodes have two attackers among their neighbours (3_robust_poisoned).
--   scripts/dpy run configs/2_robust.lua [KEY=VALUE ...]
include "0_baseline.lua"
sharing = { "trimmed_mean", f = 2 }
