--- A model: one wide hidden layer with dropout. The contract of a model: new(cfg, ctx) returns a
-- dpy.Module; ctx.dataset gives the input shape and the number of classes.
local registry = require "dpy.registry"
local nn = require "dpy.nn"

return registry.register {
  kind = "model", name = "wide_mlp",
  doc = "flatten, linear to hidden, relu, dropout, linear to classes",
  options = { hidden = { type = "integer", min = 1, default = 512, doc = "width of the hidden layer" },
              dropout = { type = "number", min = 0, below = 1, default = 0.2, doc = "dropout probability" } },
  new = function(cfg, ctx)
    local inputs = 1
    for _, s in ipairs(ctx.dataset.shape) do inputs = inputs * s end
    return nn.sequential { nn.flatten(), nn.linear(inputs, cfg.hidden), nn.relu(), nn.dropout(cfg.dropout),
                           nn.linear(cfg.hidden, ctx.dataset.classes) }
  end,
}
