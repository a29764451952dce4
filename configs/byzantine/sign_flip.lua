-- A Byzantine-robustness simulation, step by step: 10 workers of which 2 are Byzantine and send
-- the sign-flipped honest mean (scaled 1.5); each honest worker aggregates what it receives with
-- the coordinate-wise median after nearest-neighbour mixing. Prints the honest workers' mean
-- training loss as it goes, then their test accuracy.
--   scripts/dpy configs/byzantine/sign_flip.lua [ROUNDS]
local byzantine = require "dpy.byzantine"
local data = require "dpy.data"

local rounds = tonumber(arg and arg[1]) or 100
local train, test = data.fashion_mnist { train = true }, data.fashion_mnist { train = false }
local sim = byzantine.simulation {
  model = "cnn", train_set = train, partition = { "dirichlet", alpha = 1.0 },
  n = 10, f = 2, batch_size = 64, learning_rate = 0.05, momentum = 0.9, weight_decay = 1e-4,
  attack = { "sign_flip", scale = 1.5 }, aggregator = { "median" }, pre_aggregation = { "nnm" },
  byzantine_reach = "sampled", seed = 42, snapshots = false,
}
for r = 1, rounds do
  local snap = sim:step()
  if r % 10 == 0 or r == rounds then
    print(string.format("round %4d: mean honest training loss %.4f", r, snap.losses:mean():item()))
  end
end
local e = sim:evaluate(test)
print(string.format("test accuracy over the %d honest workers: mean %.4f (min %.4f, max %.4f)", #e.accuracies,
                    e.accuracy, math.min(table.unpack(e.accuracies)), math.max(table.unpack(e.accuracies))))
