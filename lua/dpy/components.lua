--- dpy.components: registers the built-in datasets, optimizers and models, so that configs can
-- name them by string.
local registry = require "dpy.registry"
local optim = require "dpy.optim"

local M = {}

for _, name in ipairs { "fashion_mnist", "mnist", "cifar10", "cifar100", "numpy", "torch" } do
  require("dpy.datasets." .. name)
end

local OPTIMIZERS = {
  sgd = { lr = true, momentum = true, dampening = true, weight_decay = true, nesterov = true },
  adam = { lr = true, betas = true, eps = true, weight_decay = true, amsgrad = true },
}
OPTIMIZERS.adamw = OPTIMIZERS.adam
for name, opts in pairs(OPTIMIZERS) do
  registry.register {
    kind = "optimizer", name = name, options = opts, doc = "optim." .. name,
    new = function(cfg, ctx)
      local o = {}
      for k in pairs(opts) do o[k] = cfg[k] end
      return optim[name](ctx.model, o)
    end,
  }
end

for _, name in ipairs { "cnn", "lenet", "mlp" } do require("dpy.models." .. name) end

return M
