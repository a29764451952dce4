-- The attacks x aggregators grid: n = 10 workers, f = 2 Byzantine, Fashion-MNIST split IID, each
-- cell a fresh simulation; prints the final mean test accuracy of the honest workers.
--   scripts/dpy configs/byzantine/sweep.lua [ROUNDS [TEST_SAMPLES [MODEL [RULES]]]]
-- RULES: a comma-separated list of row labels to run (default: every row)
-- (bench/byzantine runs it in full; the specs run a reduced grid)
local byzantine = require "dpy.byzantine"
local data = require "dpy.data"

local rounds = tonumber(arg and arg[1]) or 200
local samples = tonumber(arg and arg[2]) or 10000
local model = arg and arg[3] or "cnn"
local only = arg and arg[4]
local attacks = { "none", "sign_flip", "alie", "inner_product", "label_flipping" }
local rules = {
  { label = "mean", aggregator = { "mean" } },
  { label = "median", aggregator = { "median" } },
  { label = "trimmed_mean", aggregator = { "trimmed_mean" } },
  { label = "krum", aggregator = { "krum" } },
  { label = "geometric_median", aggregator = { "geometric_median" } },
  { label = "nnm+median", aggregator = { "median" }, pre = { "nnm" } },
  { label = "nnm+trimmed_mean", aggregator = { "trimmed_mean" }, pre = { "nnm" } },
}
if only then
  local wanted, kept = {}, {}
  for label in only:gmatch("[^,]+") do wanted[label] = true end
  for _, rule in ipairs(rules) do
    if wanted[rule.label] then kept[#kept + 1] = rule; wanted[rule.label] = nil end
  end
  local unknown = next(wanted)
  if unknown then
    error(string.format("sweep: no row %q (rows: mean, median, trimmed_mean, krum, geometric_median, "
                        .. "nnm+median, nnm+trimmed_mean)", unknown), 0)
  end
  rules = kept
end
local train, test = data.fashion_mnist { train = true }, data.fashion_mnist { train = false }

io.write(string.format("%-18s", "aggregator \\ attack"))
for _, a in ipairs(attacks) do io.write(string.format("%15s", a)) end
io.write("\n")
for _, rule in ipairs(rules) do
  io.write(string.format("%-18s", rule.label))
  for _, a in ipairs(attacks) do
    local sim = byzantine.simulation {
      model = model == "mlp" and { "mlp", hidden = { 64 } } or model, train_set = train,
      n = 10, f = a == "none" and 0 or 2, batch_size = 64, learning_rate = 0.05, momentum = 0.9,
      weight_decay = 1e-4, attack = a == "none" and "sign_flip" or a, aggregator = rule.aggregator,
      pre_aggregation = rule.pre, byzantine_reach = "all", seed = 1, snapshots = false,
    }
    sim:run(rounds)
    io.write(string.format("%15.4f", sim:evaluate(test, { samples = samples }).accuracy))
    io.flush()
  end
  io.write("\n")
end
