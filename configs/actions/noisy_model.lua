-- An example action: chosen nodes add Gaussian noise to the model they send (they keep their own
-- model clean). A modifier: it wraps the outgoing model, the framework does the rest.
--   actions = { { "configs/actions/noisy_model.lua", nodes = { 0, 3 }, sigma = 0.01 } }
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"

return registry.register {
  kind = "action",
  name = "noisy_model",
  options = { nodes = true, sigma = true },
  new = function(cfg, node)
    local chosen = false
    for _, u in ipairs(cfg.nodes or {}) do chosen = chosen or u == node.uid end
    if not chosen then return {} end
    local sigma = cfg.sigma or 0.01
    return {
      startup = function(n) n.log:write("noisy_model: sending models with noise sigma %g", sigma) end,
      pre_exchange = function(n)
        if n._noisy then return end
        n._noisy = true
        table.insert(n.outgoing, function(flat)
          local noise <close> = tensor.randn(flat:numel()) * sigma
          return flat + noise
        end)
      end,
    }
  end,
}
