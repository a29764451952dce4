--- Built-in dataset mnist: MNIST (idx files); ctx.train selects the split.
local data = require "dpy.data"

return data.component {
  name = "mnist", load = data.mnist, doc = "MNIST (idx files)",
  options = { dir = { type = "path", doc = "the directory holding the files (/usr/share/datasets/mnist)" } },
}
