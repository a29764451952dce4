--- Built-in dataset fashion_mnist: Fashion-MNIST (idx files; Debian's dataset-fashion-mnist by
-- default); ctx.train selects the split.
local data = require "dpy.data"

return data.component {
  name = "fashion_mnist", load = data.fashion_mnist,
  doc = "Fashion-MNIST (idx files; Debian's dataset-fashion-mnist by default)",
  options = { dir = { type = "path", doc = "the directory holding the files (/usr/share/datasets/fashion-mnist)" } },
}
