--- Built-in dataset cifar10: CIFAR-10, the binary version (data_batch_1.bin ... test_batch.bin) or
-- the Python one (data_batch_1 ... test_batch, what torchvision downloads); ctx.train selects the
-- split.
local data = require "dpy.data"

return data.component {
  name = "cifar10", load = data.cifar10,
  doc = "CIFAR-10, the binary version (data_batch_1.bin ... test_batch.bin) or the Python one (data_batch_1 ...)",
  options = { dir = { type = "path", doc = "the directory holding the files, or its parent "
                                            .. "(/usr/share/datasets/cifar-10-batches-bin)" },
              format = { one_of = { "auto", "binary", "python" }, default = "auto",
                         doc = "which version; auto: the one found in dir, cifar-10-batches-bin/ or "
                               .. "cifar-10-batches-py/, binary first" } },
}
