-- 0_baseline sending 8-bit models: uniform asymmetric quantization with a scale and zero point
-- per chunk of 4096 values, then zstd over the codes. Each node's metrics record the bytes before
-- and after each transform.
--   scripts/dpy run configs/4_quantized.lua [KEY=VALUE ...]
seed = 1
nodes = 16
graph = { "regular", degree = 4 }
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
batch_size = 32
local_steps = 10
rounds = 100
eval_every = 25
transforms = { { "uniform_asymmetric_quantization", bits = 8, chunk = 4096 }, { "zstd", level = 3 } }
