-- Everything at once: DP-SGD, trimmed-mean aggregation, 8-bit quantization with zstd, while 3 of
-- the 16 nodes flip their labels.
--   scripts/dpy run configs/5_combined.lua [KEY=VALUE ...]
include "0_baseline.lua"
sharing = { "trimmed_mean", f = 2 }
transforms = { { "uniform_asymmetric_quantization", bits = 8, chunk = 4096 }, { "zstd", level = 3 } }
actions = {
  { "differential_privacy", clip = 1.0, noise = 1.0, delta = 1e-5 },
  { "label_flipping", fraction = 3 / 16 },
}
