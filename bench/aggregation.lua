-- aggregation.lua: each aggregator's time on n = 32 vectors of dimension d (default 1M), as a
-- ratio to a plain mean of the same inputs, one thread. f = 4 (mda: C(32, 4) subsets).
--   dpy-lua bench/aggregation.lua [D]
local tensor = require "dpy.tensor"
local agg = require "dpy.aggregators"
local host = require "dpy.host.core"

host.set_threads(1)
local d = math.tointeger(tonumber(arg and arg[1]) or 1000000)
tensor.manual_seed(1)
local x = tensor.randn(32, d)
local function time(f)
  local r = f()   -- warm
  r:free()
  local best = math.huge
  for _ = 1, 3 do
    local t0 = host.clock()
    r = f()
    best = math.min(best, host.clock() - t0)
    r:free()
  end
  return best
end
local base = time(function() return agg.mean(x) end)
print(string.format("n = 32, d = %d: mean %.4f s", d, base))
print(string.format("%-20s %10s %10s", "rule", "seconds", "x mean"))
for _, c in ipairs {
  { "median", { f = 4 } }, { "trimmed_mean", { f = 4 } }, { "krum", { f = 4 } },
  { "multi_krum", { f = 4 } }, { "geometric_median", { f = 4 } },
  { "centered_clipping", { f = 4, radius = 10, iterations = 3 } }, { "bulyan", { f = 4 } },
  { "meamed", { f = 4 } }, { "mda", { f = 4 } }, { "nnm", { f = 4 } }, { "bucketing", { bucket = 2 } },
  { "static_clipping", { radius = 1 } } } do
  local t = time(function() return agg[c[1]](x, c[2]) end)
  print(string.format("%-20s %10.4f %10.1f", c[1], t, t / base))
end
