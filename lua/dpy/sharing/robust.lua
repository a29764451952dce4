--- Sharing rules named after every aggregator of dpy.aggregators (the non-pre-aggregations):
-- the node's own model and those received, aggregated by the rule — { "trimmed_mean", f = 1 },
-- { "krum", f = 1 }, { "median", beta = 0.2, pre = { "nnm" } } (beta: f = floor(beta * n) each
-- round; the pre-aggregations take the sharing's f unless they set one). One file registers the
-- family, since each is the same wrapper around its rule.
local registry = require "dpy.registry"
local aggregators = require "dpy.aggregators"
local tensor = require "dpy.tensor"

local function robust(name, rule)
  -- the rule over all (own model first) with its options, however the config named the sharing;
  -- f from beta when beta is given
  local function aggregate(o, all)
    local rule_entry = { name }
    for k, v in pairs(o) do
      if k ~= 1 then rule_entry[k] = v end
    end
    local f = o.f or math.floor((o.beta or 0) * #all)
    local entry, pre = aggregators.with_f(rule_entry, f), {}
    for i, p in ipairs(o.pre or {}) do pre[i] = aggregators.with_f(p, f) end
    return aggregators.aggregate(entry, all, pre)
  end
  local schema = {}   -- the rule's options, and the sharing's own
  for k, v in pairs(aggregators.schema(name)) do schema[k] = v end
  schema.beta = { type = "number", min = 0, below = 0.5, doc = "f = floor(beta * n) each round" }
  schema.pre = { list_of = "aggregator", doc = "pre-aggregations applied first (nnm, bucketing, static_clipping)" }
  registry.register {
    kind = "sharing", name = name, options = schema,
    doc = "the node's own model and those received, aggregated by " .. name .. ": " .. rule.doc,
    validate = function(o)
      if o.f ~= nil and o.beta ~= nil then return "give f or beta, not both" end
      if name == "trimmed_mean" and o.f == nil and o.beta == nil then return "give f or beta (one of them)" end
      for i, p in ipairs(o.pre or {}) do
        local pre = registry.spec("aggregator", p)
        if not pre.pre then
          return string.format("pre[%d]: '%s' is not a pre-aggregation (nnm, bucketing, static_clipping, or a "
                               .. "file whose spec says pre = true)", i, pre.name)
        end
      end
    end,
    -- fits(o, n) -> nil, or why a round of n models (its own and n - 1 received) cannot be aggregated:
    -- the config check asks it of the graph's least neighbourhood, which every round of a fixed graph has
    fits = function(o, n)
      local all = {}
      for i = 1, n do all[i] = tensor.zeros(1) end
      local ok, err = pcall(aggregate, o, all)
      for _, t in ipairs(all) do t:free() end
      if ok then err:free() return nil end
      return (tostring(err):gsub("^[^:]*:%d+: ", ""))
    end,
    new = function(o)
      return { combine = function(node, r, got)
        local own = node.model:get_flat()
        local all = { own }
        for i, x in ipairs(got) do all[i + 1] = x end
        local ok, result = pcall(aggregate, o, all)
        own:free()
        if not ok then
          -- no uid here: the run names the nodes, one line for all that failed the same way
          error(string.format("round %d: %s (its own model and %d received)", r,
                              tostring(result):gsub("^[^:]*:%d+: ", ""), #got), 0)
        end
        node.model:set_flat(result)
        result:free()
      end }
    end,
  }
end

for name, rule in pairs(aggregators.RULES) do
  if not rule.pre then robust(name, rule) end
end

