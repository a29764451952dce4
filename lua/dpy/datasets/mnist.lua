--- Built-in dataset mnist: MNIST in its IDX files.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset",
  name = "mnist",
  doc = "MNIST (IDX files, gzipped or not); ctx.train selects the training or the test split",
  options = {
    dir = { type = "path", default = data.MNIST_DIR,
            doc = "the folder of train-images-idx3-ubyte(.gz), ..., t10k-labels-idx1-ubyte(.gz)" },
  },
  new = function(cfg, ctx) return data.mnist { dir = cfg.dir, train = ctx.train ~= false } end,
}
