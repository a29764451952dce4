--- Built-in dataset cifar100: CIFAR-100, the binary version (train.bin, test.bin) or the Python
-- one (train, test); ctx.train selects the split.
local data = require "dpy.data"

return data.component {
  name = "cifar100", load = data.cifar100,
  doc = "CIFAR-100, the binary version (train.bin, test.bin) or the Python one (train, test)",
  options = { dir = { type = "path", doc = "the directory holding the files, or its parent "
                                            .. "(/usr/share/datasets/cifar-100-binary)" },
              label = { one_of = { "fine", "coarse" }, default = "fine", doc = "100 fine or 20 coarse classes" },
              format = { one_of = { "auto", "binary", "python" }, default = "auto",
                         doc = "which version; auto: the one found in dir, cifar-100-binary/ or "
                               .. "cifar-100-python/, binary first" } },
}
