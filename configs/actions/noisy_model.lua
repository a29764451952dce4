-- An example action: chosen nodes add Gaussian noise to the model they send (they keep their own
-- model clean). Its `outgoing` modifier is declared once, here; the framework applies it to the
-- model vector of every send, before the transforms.
--   actions = { { "actions/noisy_model.lua", nodes = { 0, 3 }, sigma = 0.01 } }   -- from configs/
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"

return registry.register {
  kind = "action",
  name = "noisy_model",
  options = { nodes = { type = "list", of = "integer", default = {}, doc = "the uids that add noise" },
              sigma = { type = "number", min = 0, default = 0.01, doc = "the noise's standard deviation" } },
  new = function(cfg, node)
    local chosen = false
    for _, u in ipairs(cfg.nodes) do chosen = chosen or u == node.uid end
    if not chosen then return {} end
    return {
      startup = function(n) n.log:write("noisy_model: sending models with noise sigma %g", cfg.sigma) end,
      outgoing = function(_, flat)
        local noise <close> = tensor.randn(flat:numel())
        return flat:add(noise, cfg.sigma)
      end,
    }
  end,
}
