--- Built-in dataset cifar10: CIFAR-10, the binary version (data_batch_1.bin ... test_batch.bin);
-- ctx.train selects the split.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset", name = "cifar10", doc = "CIFAR-10, the binary version (data_batch_1.bin ... test_batch.bin)",
  options = { dir = { type = "path",
                      doc = "the directory holding the files (/usr/share/datasets/cifar-10-batches-bin)" } },
  new = function(cfg, ctx) return data.cifar10 { dir = cfg.dir, train = ctx.train ~= false } end,
}
