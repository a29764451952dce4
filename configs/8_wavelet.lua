-- 0_baseline sharing in a wavelet domain (JWINS): the model's Daubechies-4 (db2) coefficients, the
-- 10 % of them whose accumulated change is largest each round, then zstd; the receiver averages
-- the coefficients and inverts the transform.
--   scripts/dpy run configs/8_wavelet.lua [KEY=VALUE ...]
include "0_baseline.lua"
sharing = { "wavelet", alpha = 0.1, family = "daubechies", member = 4 }
transforms = { { "zstd", level = 3 } }
