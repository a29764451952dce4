-- 0_baseline with DP-SGD on every node: per-sample gradients clipped to norm 1, Gaussian noise
-- of 1.0 x the clip added to their sum; the Renyi-DP accountant records epsilon (for delta 1e-5)
-- in each node's metrics every round.
--   scripts/dpy run configs/1_private.lua [KEY=VALUE ...]
include "0_baseline.lua"
actions = { { "differential_privacy", clip = 1.0, noise = 1.0, delta = 1e-5 } }
