--- Built-in dataset mnist: MNIST (idx files); ctx.train selects the split.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset", name = "mnist", doc = "MNIST (idx files)",
  options = { dir = { type = "path", doc = "the directory holding the files (/usr/share/datasets/mnist)" } },
  new = function(cfg, ctx) return data.mnist { dir = cfg.dir, train = ctx.train ~= false } end,
}
