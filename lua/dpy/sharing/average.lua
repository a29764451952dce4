--- Sharing average: the node's model becomes the weighted average of its own and the models it
-- received, with the algorithm's weights (D-PSGD: Metropolis-Hastings; a dropped peer's weight
-- stays with the node).
-- The contract of a sharing rule: new(cfg, node) returns { combine = function(node, r, got,
-- weights, own_weight) }, where got lists the received flat float32 models of round r (freed by
-- the caller), weights their weights and own_weight the node's; combine sets node.model.
local registry = require "dpy.registry"

return registry.register {
  kind = "sharing", name = "average",
  doc = "weighted average with Metropolis-Hastings weights (a dropped peer's weight stays home)",
  new = function()
    return { mixes = true,   -- writes the model by model:mix alone (see dpsgd)
             combine = function(node, _, got, weights, own_weight)
      node.model:mix(own_weight, got, weights)   -- in place, no copy of the model
    end }
  end,
}
