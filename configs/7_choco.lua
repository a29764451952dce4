-- 0_baseline with CHOCO-SGD: each node sends the top 1 % of the difference between its model and
-- its public copy, every node keeps its neighbours' public copies, and mixes with step size gamma
-- (0.2: the best of 0.1, 0.2 and 0.5 over 100 rounds at 1 %; see docs/performance.md).
--   scripts/dpy run configs/7_choco.lua [KEY=VALUE ...]
include "0_baseline.lua"
sharing = { "choco", compressor = "topk", alpha = 0.01, gamma = 0.2 }
transforms = { { "zstd", level = 3 } }
