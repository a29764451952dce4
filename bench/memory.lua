-- Fashion-MNIST load time and resident memory: idle, after loading the data, after training.
-- usage: dpy-lua bench/memory.lua
local host = require "dpy.host.core"
local dpy = require "dpy"
local registry = require "dpy.registry"

local function mib(b) return b / 2 ^ 20 end
local idle = host.memory().rss
local t0 = host.clock()
local train = dpy.data.fashion_mnist {}
local test = dpy.data.fashion_mnist { train = false }
local load = host.clock() - t0
local loaded = host.memory().rss
local model = registry.build("model", "cnn", { dataset = train })
local tr = dpy.trainer.new { model = model, optimizer = dpy.optim.sgd(model, { lr = 0.01, momentum = 0.9 }),
                             loader = dpy.data.loader(train, { batch_size = 32 }) }
tr:run(200)
dpy.trainer.evaluate(model, test)
local m = host.memory()
print(string.format("fmnist_load_seconds %.3f", load))
print(string.format("rss_idle_mib %.1f", mib(idle)))
print(string.format("rss_with_data_mib %.1f", mib(loaded)))
print(string.format("rss_training_mib %.1f", mib(m.rss)))
print(string.format("lua_heap_kib %.1f", m.lua_bytes / 1024))
print(string.format("tensor_peak_mib %.1f", mib(m.tensor_peak)))
