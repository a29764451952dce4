--- Built-in dataset fashion_mnist: Fashion-MNIST (idx files; Debian's dataset-fashion-mnist by
-- default); ctx.train selects the split.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset", name = "fashion_mnist",
  doc = "Fashion-MNIST (idx files; Debian's dataset-fashion-mnist by default)",
  options = { dir = { type = "path", doc = "the directory holding the files (/usr/share/datasets/fashion-mnist)" } },
  new = function(cfg, ctx) return data.fashion_mnist { dir = cfg.dir, train = ctx.train ~= false } end,
}
