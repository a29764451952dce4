--- Sharing average: the node's model becomes the weighted average of its own and the models it
-- received, with the algorithm's weights (D-PSGD: Metropolis-Hastings; a dropped peer's weight
-- stays with the node).
-- The contract of a sharing rule: new(cfg, node) returns { combine = function(node, r, got,
-- weights, own_weight) }, where got lists the received flat float32 models of round r (freed by
-- the caller), weights their weights and own_weight the node's; combine sets node.model. A rule
-- that writes the model by model:mix or model:set_flat alone says mixes = true: it may then get
-- the model while local receivers still read the parameters it sent (see exchange.combine).
local registry = require "dpy.registry"

return registry.register {
  kind = "sharing", name = "average",
  doc = "weighted average with Metropolis-Hastings weights (a dropped peer's weight stays home)",
  new = function()
    return { mixes = true,   -- writes the model by model:mix alone (see dpsgd)
             combine = function(node, _, got, weights, own_weight)
      node.model:mix(own_weight, got, weights)   -- no copy of the model: in place, or into a new buffer
    end }
  end,
}
