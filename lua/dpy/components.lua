--- dpy.components: registers the built-in datasets, optimizers and models, so that configs can
-- name them by string.
local registry = require "dpy.registry"
local data = require "dpy.data"
local optim = require "dpy.optim"

local M = {}

local DATASETS = {
  fashion_mnist = { dir = true }, mnist = { dir = true }, cifar10 = { dir = true },
  cifar100 = { dir = true, label = true },
}
for name, opts in pairs(DATASETS) do
  registry.register {
    kind = "dataset", name = name, options = opts,
    doc = "data." .. name .. "; ctx.train selects the training or the test split",
    new = function(cfg, ctx)
      local o = { train = ctx.train ~= false }
      for k in pairs(opts) do o[k] = cfg[k] end
      return data[name](o)
    end,
  }
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
for _, name in ipairs { "image_folder", "femnist", "camelyon17" } do require("dpy.datasets." .. name) end

return M
