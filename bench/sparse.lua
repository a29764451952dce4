-- bench/sparse.lua: the sparse codec's figures, one core: top-k selection on 10 M floats against
-- libtorch's topk, and encode + decode of a 1 %-sparse 10 M-float model (GB/s of dense input:
-- the 40 MB the model takes), the codec alone and the whole way (select, gather, encode, decode,
-- scatter into a dense vector). Times are the process's CPU time (os.clock), best of 5: on a
-- shared machine the wall clock measures the other work too.
--   build/dpy-lua bench/sparse.lua [N (default 10000000)]
local tensor = require "dpy.tensor"
local sparse = require "dpy.sparse"
local host = require "dpy.host.core"

host.set_threads(1)   -- per core
tensor.manual_seed(1)
local n = math.tointeger(tonumber(arg and arg[1]) or 1e7)
local k = n // 100
local x = tensor.randn(n)
local gb = x:nbytes() / 1e9

local function time(f, reps)
  f()   -- warm: first-touch page faults are not the codec's
  local best = math.huge
  for _ = 1, reps do
    local t0 = os.clock()
    f()
    best = math.min(best, os.clock() - t0)
  end
  return best
end

print(string.format("%d float32 values (%.0f MB), k = %d (1 %%), CPU time, best of 5", n, x:nbytes() / 1e6, k))
local ours = time(function() sparse.topk(x, k):free() end, 5)
local theirs = time(function()
  local a <close> = x:abs()
  local v, i = a:topk(k)
  v:free(); i:free()
end, 5)
print(string.format("top-k selection: sparse.topk %.1f ms, libtorch abs + topk %.1f ms (%.2fx)",
                    ours * 1e3, theirs * 1e3, theirs / ours))
print(string.format("figure sparse_topk_speedup_over_libtorch %.2f >= 1", theirs / ours))

local idx = sparse.topk(x, k)
local values = x:index_select(0, idx)
for _, vtype in ipairs { "float32", "float16", "bfloat16" } do
  local payload = sparse.encode(n, idx, values, vtype)
  local enc = time(function() sparse.encode(n, idx, values, vtype):free() end, 5)
  local dec = time(function()
    local _, i, v = sparse.decode(payload, n)
    i:free(); v:free()
  end, 5)
  local whole = time(function()
    local sel <close> = sparse.topk(x, k)
    local val <close> = x:index_select(0, sel)
    local p <close> = sparse.encode(n, sel, val, vtype)
    local _, i, v = sparse.decode(p, n)
    local dense <close> = tensor.zeros(n)
    sparse.scatter_(dense, i, v)
    i:free(); v:free()
  end, 5)
  print(string.format("%-8s payload %8d bytes (%.1f per value; dense %.0fx larger); codec encode + decode "
                      .. "%.2f ms = %.1f GB/s of dense input; select + encode + decode + scatter %.1f ms = %.2f GB/s",
                      vtype, payload:nbytes(), payload:nbytes() / k, x:nbytes() / payload:nbytes(),
                      (enc + dec) * 1e3, gb / (enc + dec), whole * 1e3, gb / whole))
  print(string.format("figure sparse_codec_%s_GBps %.1f >= 1", vtype, gb / (enc + dec)))
  payload:free()
end
