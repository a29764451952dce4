-- 2_robust under attack: 3 of the 16 nodes (a seeded choice, recorded in manifest.json) train on
-- flipped labels (y -> 9 - y). For contrast, the same attack under plain averaging:
--   scripts/dpy run configs/3_robust_poisoned.lua sharing=average
include "0_baseline.lua"
sharing = { "trimmed_mean", f = 2 }
actions = { { "label_flipping", fraction = 3 / 16 } }
