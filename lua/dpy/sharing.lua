--- dpy.sharing: how a D-PSGD node combines its model with the models its neighbours sent
-- (config key `sharing`). A sharing is { combine = function(node, r, got, weights, own_weight) },
-- where got lists the received flat models and weights their Metropolis-Hastings weights.
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

registry.register {
  kind = "sharing", name = "trimmed_mean", options = { f = true, beta = true },
  doc = "coordinate-wise trimmed mean over the node's own model and those received, dropping the "
        .. "f largest and f smallest values (or f = floor(beta * n))",
  validate = function(o)
    if o.f ~= nil and (math.type(o.f) ~= "integer" or o.f < 0) then
      return "f must be an integer >= 0"
    end
    if o.beta ~= nil and (type(o.beta) ~= "number" or o.beta < 0 or o.beta >= 0.5) then
      return "beta must be in [0, 0.5)"
    end
    if (o.f == nil) == (o.beta == nil) then return "give f or beta (one of them)" end
  end,
  new = function(o)
    return { combine = function(node, r, got)
      local own = node.model:get_flat()
      local all = { own }
      for i, x in ipairs(got) do all[i + 1] = x end
      local f = aggregators.trim_count(#all, o.f, o.beta)
      local ok, result = pcall(aggregators.trimmed_mean, all, f)
      own:free()
      if not ok then
        error(string.format("round %d: node %d: %s (its own model and %d received)", r, node.uid,
                            result, #got), 0)
      end
      node.model:set_flat(result)
      result:free()
    end }
  end,
}

return {}
