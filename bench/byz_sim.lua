-- byz_sim.lua: the Lua side of bench/byzantine's simulation figure: dpy.byzantine.simulation with
-- the settings of byz_sim.cpp (n = 10, f = 2, sign flip 1.5, median, byzantine_reach = "all",
-- cnn, batch 64, one thread). Prints "rounds_per_second <x>".
--   dpy-lua bench/byz_sim.lua [ROUNDS]
local byzantine = require "dpy.byzantine"
local data = require "dpy.data"
local host = require "dpy.host.core"

host.set_threads(1)
local rounds = tonumber(arg and arg[1]) or 20
local sim = byzantine.simulation {
  model = "cnn", train_set = data.fashion_mnist { train = true }, n = 10, f = 2, batch_size = 64,
  learning_rate = 0.05, momentum = 0.9, weight_decay = 1e-4, attack = { "sign_flip", scale = 1.5 },
  aggregator = { "median" }, byzantine_reach = "all", seed = 1, snapshots = false,
}
sim:step()   -- warm
local t0 = host.clock()
sim:run(rounds)
print(string.format("rounds_per_second %.4f", rounds / (host.clock() - t0)))
