--- dpy.aggregators: robust aggregation of n vectors of dimension d, given as a list of 1-d
-- tensors or an n x d tensor; vectorized over coordinates in C++ (host/torch/aggregate.cpp), on
-- the inputs' device. Each rule refuses an (n, f) outside what it tolerates, with a message.
--   aggregators.median(vectors, { f = 2 })               -> d tensor
--   aggregators.aggregate({ "krum", f = 2 }, vectors, { { "nnm", f = 2 } })   -- pre-aggregations first
local core = require "dpy.aggregate.core"
local tensor = require "dpy.tensor"
local registry = require "dpy.registry"
local options = require "dpy.options"

local M = {}

-- The options, declared once for every rule that takes them (the C binding refuses a value of the
-- wrong type or range, naming the option and the rule). f has no default here: an entry without
-- one takes the simulation's or the sharing's f (with_f), a direct call 0.
-- The counts' bound is the C binding's (an int): a config check without it let through what failed
-- every node in its first round.
local INT = 2147483647
local function int(v) if v > INT then return string.format("must be at most %d, got %s", INT, v) end end
local OPT = {
  f = { type = "integer", min = 0, check = int, doc = "Byzantine inputs to tolerate (0 in a direct call)" },
  m = { type = "integer", min = 1, check = int, doc = "inputs averaged, at most n - f (default n - f)" },
  max_iter = { type = "integer", min = 1, check = int, default = 100, doc = "Weiszfeld steps at most" },
  tol = { type = "number", above = 0, default = 1e-6,
          doc = "stop after a step that moves z by at most tol x max(|z|, eps)" },
  eps = { type = "number", above = 0, default = 1e-8, doc = "distances floored at eps in the weights" },
  radius = { type = "number", above = 0, doc = "the clipping norm (required)" },
  iterations = { type = "integer", min = 1, check = int, default = 1, doc = "clipping steps L" },
  center = { check = function(v)
               if not tensor.is_tensor(v) then
                 return "must be a dpy.Tensor (a d-vector of finite values), got " .. options.show(v)
               end
             end, doc = "a d-vector dpy.Tensor of finite values to start from (zeros)" },
  bucket = { type = "integer", min = 1, check = int, default = 1, doc = "inputs per bucket" },
  seed = { type = "integer", min = 0, default = 0, doc = "the shuffle's seed" },
}

local function taking(...)
  local t = {}
  for _, k in ipairs { ... } do t[k] = OPT[k] end
  return t
end

--- The rules: options, what they tolerate, and what they do. pre = true: a pre-aggregation
-- (rows in, rows out), composed in front of an aggregator. Ties go to the lowest row index.
M.RULES = {
  mean = { options = {}, tolerates = "f = 0 (no robustness)", doc = "the coordinate-wise mean" },
  median = { options = taking "f", tolerates = "n > 2f",
             doc = "the coordinate-wise median (the mean of the two middle values when n is even)" },
  trimmed_mean = { options = taking "f", tolerates = "n > 2f",
                   doc = "per coordinate, the mean after dropping the f largest and f smallest values" },
  krum = { options = taking "f", tolerates = "n > 2f + 2",
           doc = "the input whose n - f - 2 nearest others are closest (sum of squared distances)" },
  multi_krum = { options = taking("f", "m"), tolerates = "n > 2f + 2, 1 <= m <= n - f",
                 doc = "the mean of the m inputs with the best Krum scores (m = n - f by default)" },
  geometric_median = { options = taking("f", "tol", "max_iter", "eps"), tolerates = "n > 2f",
                       doc = "Weiszfeld's iterations from the mean (tol 1e-6 relative to |z|, max_iter 100, "
                             .. "distances floored at eps 1e-8); non-finite inputs are left out" },
  centered_clipping = { options = taking("f", "radius", "iterations", "center"), tolerates = "n > 2f",
                        doc = "from center (zeros), L = iterations steps of v += mean of (x - v) "
                              .. "clipped to norm radius" },
  bulyan = { options = taking "f", tolerates = "n >= 4f + 3",
             doc = "n - 2f inputs chosen by Krum one at a time, then per coordinate the mean of the "
                   .. "n - 4f values closest to their median" },
  meamed = { options = taking "f", tolerates = "n > 2f",
             doc = "per coordinate, the mean of the n - f values closest to the median" },
  mda = { options = taking "f", tolerates = "n > 2f, C(n, f) <= 10^6",
          doc = "minimum-diameter averaging: the mean of the n - f inputs of smallest diameter" },
  nnm = { pre = true, options = taking "f", tolerates = "n > 2f",
          doc = "nearest-neighbour mixing: each input becomes the mean of its n - f nearest (itself first)" },
  bucketing = { pre = true, options = taking("bucket", "seed"), tolerates = "any n",
                doc = "a seeded shuffle, then the mean of each bucket of `bucket` inputs" },
  static_clipping = { pre = true, options = taking "radius", tolerates = "any n",
                      doc = "each input scaled down to norm at most radius" },
}

--- The dpy.options schema of rule name.
function M.schema(name) return M.RULES[name].options end

local function matrix(vectors, name)
  if tensor.is_tensor(vectors) then return vectors, false end
  if type(vectors) ~= "table" then   -- '#' of it raised "attempt to get length of a nil value"
    error(string.format("aggregators.%s: a list of 1-d tensors or an n x d tensor expected, got %s", name,
                        type(vectors) == "userdata" and tostring(vectors) or type(vectors)), 3)
  end
  if #vectors == 0 then error("aggregators: no vectors to aggregate", 3) end
  return tensor.stack(vectors, 0), true
end

local function call(rule, vectors, opts)
  local x, own = matrix(vectors, rule)
  local ok, r = pcall(core.aggregate, rule, x, opts)
  if own then x:free() end
  if not ok then error(r, 3) end
  return r
end

for name in pairs(M.RULES) do
  local schema = M.schema(name)
  M[name] = function(vectors, opts)
    return call(name, vectors, options.check(opts or {}, schema, "aggregators." .. name, 2))
  end
end

--- A copy of a rule entry ("median", { "krum", ... } or a user's file) with f set to f where the
-- rule takes one and the entry gives none; keys that are not the rule's options (a sharing's pre
-- and beta) are left out.
function M.with_f(entry, f)
  local schema = registry.spec("aggregator", type(entry) == "table" and entry[1] or entry, 2).options or {}
  local out = { type(entry) == "table" and entry[1] or entry }
  for k, v in pairs(type(entry) == "table" and entry or {}) do
    if k ~= 1 and schema[k] then out[k] = v end
  end
  if schema.f and out.f == nil then out.f = f end
  return out
end

--- aggregators.aggregate(rule, vectors [, pre]) -> d tensor: rule ("median", { "krum", f = 2 },
-- or the path of a user's aggregator file) after the pre-aggregations in pre ({ { "nnm", f = 2 },
-- ... }), in order.
function M.aggregate(rule, vectors, pre)
  local x, own = matrix(vectors, "aggregate")
  for _, p in ipairs(pre or {}) do
    local spec = registry.spec("aggregator", p, 2)
    if not spec.pre then
      error(string.format("aggregators: '%s' is not a pre-aggregation (nnm, bucketing, static_clipping, or a "
                          .. "file whose spec says pre = true)", spec.name), 2)
    end
    local y = registry.build("aggregator", p)(x)
    if own then x:free() end
    x, own = y, true
  end
  local spec = registry.spec("aggregator", rule, 2)
  if spec.pre then
    error(string.format("aggregators: '%s' is a pre-aggregation, not an aggregator", spec.name), 2)
  end
  local r = registry.build("aggregator", rule)(x)
  if own then x:free() end
  return r
end

for name, rule in pairs(M.RULES) do
  registry.register {
    kind = "aggregator", name = name, options = M.schema(name), pre = rule.pre,
    doc = rule.doc .. " (tolerates " .. rule.tolerates .. ")",
    new = function(opts) return function(vectors) return call(name, vectors, opts) end end,
  }
end

return M
