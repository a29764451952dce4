--- A multi-layer perceptron over flattened images: hidden = {200, 200} by default.
local registry = require "dpy.registry"
local nn = require "dpy.nn"

return registry.register {
  kind = "model",
  name = "mlp",
  outputs = "logits",   -- loss = "nll" is refused before the run
  doc = "flatten, then linear + relu per hidden size, then linear to classes",
  options = {
    classes = { type = "integer", min = 1, doc = "outputs (the dataset's classes)" },
    hidden = { type = "list", of = "integer", min = 1, default = { 200, 200 }, doc = "the hidden layers' sizes" },
    inputs = { type = "integer", min = 1, doc = "inputs (the product of the dataset's shape)" },
  },
  new = function(cfg, ctx)
    local ds = ctx.dataset
    local classes = cfg.classes or (ds and ds.classes) or 10
    local inputs = cfg.inputs
    if not inputs then
      inputs = 1
      for _, s in ipairs(ds and ds.shape or { 1, 28, 28 }) do inputs = inputs * s end
    end
    local layers = { nn.flatten() }
    for _, h in ipairs(cfg.hidden) do
      layers[#layers + 1] = nn.linear(inputs, h)
      layers[#layers + 1] = nn.relu()
      inputs = h
    end
    layers[#layers + 1] = nn.linear(inputs, classes)
    return nn.sequential(layers)
  end,
}
