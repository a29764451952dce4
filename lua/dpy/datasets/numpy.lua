--- Built-in dataset numpy: images and labels from NumPy files (.npz archives of numpy.savez or
-- savez_compressed, or one .npy file per array of numpy.save).
local registry = require "dpy.registry"
local data = require "dpy.data"

local OPTIONS = data.array_options("numpy")

return registry.register {
  kind = "dataset",
  name = "numpy",
  doc = "uint8 or float32 images and integer labels from .npz / .npy files; ctx.train selects "
        .. "the training or the test split",
  options = OPTIONS,
  new = function(cfg, ctx)
    local o = { train = ctx.train ~= false }
    for k in pairs(OPTIONS) do o[k] = cfg[k] end
    return data.numpy(o)
  end,
}
