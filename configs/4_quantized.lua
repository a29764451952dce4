-- 0_baseline sending 8-bit models: uniform asymmetric quantization with a scale and zero point
-- per chunk of 4096 values, then zstd over the codes. Each node's metrics record the bytes before
-- and after each transform.
--   scripts/dpy run configs/4_quantized.lua [KEY=VALUE ...]
include "0_baseline.lua"
transforms = { { "uniform_asymmetric_quantization", bits = 8, chunk = 4096 }, { "zstd", level = 3 } }
