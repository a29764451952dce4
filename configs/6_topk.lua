-- 0_baseline sending a tenth of the model: each round the 10 % of coordinates whose accumulated
-- change (error feedback) is largest, as (index, value) pairs, then zstd over those bytes. A
-- coordinate not received keeps the neighbour's last known value. Each node's metrics split the
-- bytes into indices, values and header.
--   scripts/dpy run configs/6_topk.lua [KEY=VALUE ...]
include "0_baseline.lua"
sharing = { "topk", alpha = 0.1 }
transforms = { { "zstd", level = 3 } }
