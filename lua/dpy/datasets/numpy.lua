--- The numpy dataset: images and labels from NumPy files, .npz archives (numpy.savez,
-- savez_compressed) or one .npy file per array (numpy.save); see data.numpy.
local registry = require "dpy.registry"
local data = require "dpy.data"

local M = {}

M.options = data.array_options("numpy")

--- numpy.load{dir, train = true, ...} -> dataset (data.numpy)
M.load = data.numpy

M.spec = registry.register {
  kind = "dataset", name = "numpy", options = M.options,
  doc = "uint8 or float32 images and integer labels from .npz / .npy files; ctx.train selects the split",
  new = function(cfg, ctx)
    local o = { train = ctx.train ~= false }
    for key in pairs(M.options) do o[key] = cfg[key] end
    return M.load(o)
  end,
}

return M
