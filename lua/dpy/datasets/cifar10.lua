--- Built-in dataset cifar10: CIFAR-10, its binary version or its Python (pickle) one.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset",
  name = "cifar10",
  doc = "CIFAR-10 (binary or Python batches); ctx.train selects the training or the test split",
  options = {
    dir = { type = "path", default = data.CIFAR10_DIR,
            doc = "the folder of data_batch_1.bin ... test_batch.bin (binary) or data_batch_1 ... "
                  .. "test_batch (Python), or the folder above cifar-10-batches-bin/ or -py/" },
    format = { type = "string", one_of = { "auto", "binary", "python" }, default = "auto",
               doc = "which version; auto: the one found, binary first" },
  },
  new = function(cfg, ctx)
    return data.cifar10 { dir = cfg.dir, format = cfg.format, train = ctx.train ~= false }
  end,
}
