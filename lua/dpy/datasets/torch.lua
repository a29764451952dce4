--- Built-in dataset torch: images and labels from files of PyTorch's torch.save (and of
-- dpy.tensor's t:save): a tuple or list (images, labels), a dict of them, or one tensor a file.
local registry = require "dpy.registry"
local data = require "dpy.data"

local OPTIONS = data.array_options("torch")

return registry.register {
  kind = "dataset",
  name = "torch",
  doc = "uint8 or float32 images and integer labels from torch.save files; ctx.train selects "
        .. "the training or the test split",
  options = OPTIONS,
  new = function(cfg, ctx)
    local o = { train = ctx.train ~= false }
    for k in pairs(OPTIONS) do o[k] = cfg[k] end
    return data.torch(o)
  end,
}
