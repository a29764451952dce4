--- dpy.sharing: how a D-PSGD node combines its model with the models its neighbours sent
-- (config key `sharing`). A sharing is { combine = function(node, r, got, weights, own_weight) },
-- where got lists the received flat models and weights their Metropolis-Hastings weights.
-- Besides "average", every aggregator of dpy.aggregators is a sharing of the same name, over the
-- node's own model and those received: { "trimmed_mean", f = 1 }, { "krum", f = 1 },
-- { "median", beta = 0.2, pre = { "nnm" } } (beta: f = floor(beta * n) per round; the
-- pre-aggregations take the sharing's f unless they set one).
local registry = require "dpy.registry"
local aggregators = require "dpy.aggregators"

registry.register {
  kind = "sharing", name = "average",
  doc = "weighted average with Metropolis-Hastings weights (a dropped peer's weight stays home)",
  new = function()
    return { combine = function(node, _, got, weights, own_weight)
      node.model:mix(own_weight, got, weights)   -- in place, no copy of the model
    end }
  end,
}

local function robust(name, rule)
  local options = { pre = true, beta = true }
  for k in pairs(rule.options) do options[k] = true end
  registry.register {
    kind = "sharing", name = name, options = options,
    doc = "the node's own model and those received, aggregated by " .. name .. ": " .. rule.doc,
    validate = function(o)
      if o.f ~= nil and (math.type(o.f) ~= "integer" or o.f < 0) then
        return "f must be an integer >= 0"
      end
      if o.beta ~= nil and (type(o.beta) ~= "number" or o.beta < 0 or o.beta >= 0.5) then
        return "beta must be in [0, 0.5)"
      end
      if o.f ~= nil and o.beta ~= nil then return "give f or beta, not both" end
      if name == "trimmed_mean" and o.f == nil and o.beta == nil then return "give f or beta (one of them)" end
      if o.pre ~= nil and type(o.pre) ~= "table" then return "pre must be a list of pre-aggregations" end
    end,
    new = function(o)
      return { combine = function(node, r, got)
        local own = node.model:get_flat()
        local all = { own }
        for i, x in ipairs(got) do all[i + 1] = x end
        local f = o.f or math.floor((o.beta or 0) * #all)
        local entry, pre = aggregators.with_f(o, f), {}
        for i, p in ipairs(o.pre or {}) do pre[i] = aggregators.with_f(p, f) end
        local ok, result = pcall(aggregators.aggregate, entry, all, pre)
        own:free()
        if not ok then
          error(string.format("round %d: node %d: %s (its own model and %d received)", r, node.uid,
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

return {}
