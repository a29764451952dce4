-- bench/mitigations.lua: the figures of privacy, robustness and efficiency, measured in one run:
-- quantize + dequantize throughput, zstd and fpzip throughput and ratio on trained weights (the
-- cnn after 300 steps on Fashion-MNIST). The DP-SGD step: bench/dpsgd.lua.
--   build/dpy-lua bench/mitigations.lua
local tensor = require "dpy.tensor"
local nn = require "dpy.nn"
local data = require "dpy.data"
local optim = require "dpy.optim"
local codec = require "dpy.codec.core"
local host = require "dpy.host.core"
local registry = require "dpy.registry"

host.set_threads(1)   -- per core
tensor.manual_seed(1)
local train = data.fashion_mnist { train = true }
local model = registry.build("model", "cnn", { dataset = train })
local opt = optim.sgd(model, { lr = 0.01, momentum = 0.9 })
local loader = data.loader(train, { batch_size = 32 })

local function plain_step()
  local xb, yb = loader:next()
  local x <close> = xb
  local y <close> = yb
  opt:zero_grad()
  local out <close> = model(x)
  local loss <close> = nn.cross_entropy(out, y)
  loss:backward()
  opt:step()
end

local function time(f, n)
  f()   -- warm: first-touch page faults are not the codec's
  local t0 = host.clock()
  for _ = 1, n do f() end
  return (host.clock() - t0) / n
end

for _ = 1, 300 do plain_step() end
local weights = model:get_flat()
print(string.format("trained weights: %d float32 values (%.2f MB)", weights:numel(), weights:nbytes() / 1e6))

-- throughput on a 10M-value vector of the trained weights, repeated
local big = tensor.cat { weights, weights, weights, weights, weights, weights, weights, weights,
                         weights, weights, weights, weights, weights, weights, weights, weights,
                         weights, weights, weights, weights, weights, weights, weights, weights,
                         weights, weights, weights, weights, weights, weights, weights, weights,
                         weights, weights, weights, weights, weights, weights, weights, weights,
                         weights, weights, weights, weights, weights, weights }
local gb = big:nbytes() / 1e9
print("\n== quantization (one core), on " .. big:numel() .. " values")
print(string.format("%6s %7s %12s %12s %14s %12s", "bits", "chunk", "encode GB/s", "decode GB/s",
                    "enc+dec GB/s", "ratio"))
for _, c in ipairs { { 8, 0 }, { 8, 4096 }, { 4, 4096 }, { 2, 4096 }, { 16, 0 } } do
  local q
  local te = time(function() if q then q:free() end; q = codec.quantize(big, c[1], c[2]) end, 5)
  local y
  local td = time(function() if y then y:free() end; y = codec.dequantize(q) end, 5)
  print(string.format("%6d %7d %12.2f %12.2f %14.2f %12.2f", c[1], c[2], gb / te, gb / td,
                      gb / (te + td), big:nbytes() / q:nbytes()))
  q:free(); y:free()
end

print("\n== compression of the trained weights (one core)")
print(string.format("%-34s %12s %12s %8s", "codec", "encode MB/s", "decode MB/s", "ratio"))
local mb = weights:nbytes() / 1e6
local function row(name, enc, dec)
  local out
  local te = time(function() if out then out:free() end; out = enc() end, 5)
  local td = time(function() local r = dec(out); r:free() end, 5)
  print(string.format("%-34s %12.0f %12.0f %8.3f", name, mb / te, mb / td, weights:nbytes() / out:nbytes()))
  out:free()
end
for _, level in ipairs { 1, 3, 9 } do
  row("zstd level " .. level .. " (raw float32)", function() return codec.zstd(weights, level) end,
      function(b) return codec.unzstd(b, "float32") end)
end
row("fpzip lossless", function() return codec.fpzip(weights, 0) end, codec.unfpzip)
row("fpzip 16 bits", function() return codec.fpzip(weights, 16) end, codec.unfpzip)
local q8 = codec.quantize(weights, 8, 4096)
row("8-bit quantization, then zstd 3", function() local z = codec.zstd(q8, 3); return z end,
    function(b) local u = codec.unzstd(b, "uint8"); local r = codec.dequantize(u); u:free(); return r end)

