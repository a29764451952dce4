-- The Lua side of the training-overhead benchmark: dpy.trainer's own step (cnn on
-- Fashion-MNIST, batch 32, SGD lr 0.01 momentum 0.9), timed after a warm-up. It writes the
-- initial weights and the batch order to DIR, so that bench_train_cpp repeats exactly the same
-- computation, and prints a checksum of the final weights for both to compare.
-- usage: dpy-lua bench/train_lua.lua STEPS SEED DIR   (threads from DPY_THREADS)
local dpy = require "dpy"
local host = require "dpy.host.core"
local registry = require "dpy.registry"

local steps, seed, dir = tonumber(arg[1] or 300), math.tointeger(tonumber(arg[2] or 1)), arg[3]
local WARMUP = 20
dpy.tensor.manual_seed(seed)
local train = dpy.data.fashion_mnist {}
local model = registry.build("model", "cnn", { dataset = train })
local opt = dpy.optim.sgd(model, { lr = 0.01, momentum = 0.9 })
local loader = dpy.data.loader(train, { batch_size = 32 })
if dir then
  loader:_start_epoch()
  assert(model:get_flat():save(dir .. "/init.pt"))
  assert(loader.order:save(dir .. "/order.pt"))
  loader.pos = 0
end
local tr = dpy.trainer.new { model = model, optimizer = opt, loader = loader }
tr:run(WARMUP)
local t0 = host.clock()
tr:run(steps)
print(string.format("steps_per_second %.3f", steps / (host.clock() - t0)))
print(string.format("checksum %.6f", model:get_flat():abs():sum():item()))
