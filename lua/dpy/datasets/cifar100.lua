--- Built-in dataset cifar100: CIFAR-100, its binary version or its Python (pickle) one.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset",
  name = "cifar100",
  doc = "CIFAR-100 (binary or Python files); ctx.train selects the training or the test split",
  options = {
    dir = { type = "path", default = data.CIFAR100_DIR,
            doc = "the folder of train.bin, test.bin (binary) or train, test (Python), or the "
                  .. "folder above cifar-100-binary/ or cifar-100-python/" },
    label = { type = "string", one_of = { "fine", "coarse" }, default = "fine",
              doc = "the 100 fine classes or the 20 coarse ones" },
    format = { type = "string", one_of = { "auto", "binary", "python" }, default = "auto",
               doc = "which version; auto: the one found, binary first" },
  },
  new = function(cfg, ctx)
    return data.cifar100 { dir = cfg.dir, label = cfg.label, format = cfg.format,
                           train = ctx.train ~= false }
  end,
}
