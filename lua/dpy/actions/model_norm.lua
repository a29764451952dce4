--- Built-in action model_norm: records the L2 norm of the model after local training
-- (metric "model_norm") and after averaging ("mixed_norm").
local registry = require "dpy.registry"

return registry.register {
  kind = "action",
  name = "model_norm",
  doc = "records the model's L2 norm after training and after the exchange",
  new = function()
    local function norm(node)
      local flat <close> = node.model:get_flat()
      return flat:norm():item()
    end
    return {
      post_train = function(node, r) node.metrics:add("model_norm", r, norm(node)) end,
      post_exchange = function(node, r) node.metrics:add("mixed_norm", r, norm(node)) end,
    }
  end,
}
