--- Built-in dataset fashion_mnist: Fashion-MNIST in its IDX files (Debian's dataset-fashion-mnist).
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset",
  name = "fashion_mnist",
  doc = "Fashion-MNIST (IDX files, gzipped or not); ctx.train selects the training or the test split",
  options = {
    dir = { type = "path", default = data.FASHION_MNIST_DIR,
            doc = "the folder of train-images-idx3-ubyte(.gz), ..., t10k-labels-idx1-ubyte(.gz)" },
  },
  new = function(cfg, ctx) return data.fashion_mnist { dir = cfg.dir, train = ctx.train ~= false } end,
}
