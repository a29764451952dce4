--- Built-in dataset cifar100: CIFAR-100, the binary version (train.bin, test.bin); ctx.train
-- selects the split.
local registry = require "dpy.registry"
local data = require "dpy.data"

return registry.register {
  kind = "dataset", name = "cifar100", doc = "CIFAR-100, the binary version (train.bin, test.bin)",
  options = { dir = { type = "path", doc = "the directory holding the files (/usr/share/datasets/cifar-100-binary)" },
              label = { one_of = { "fine", "coarse" }, default = "fine", doc = "100 fine or 20 coarse classes" } },
  new = function(cfg, ctx) return data.cifar100 { dir = cfg.dir, label = cfg.label, train = ctx.train ~= false } end,
}
