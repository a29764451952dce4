--- The numpy dataset: images and labels from NumPy files, .npz archives (numpy.savez,
-- savez_compressed) or one .npy file per array (numpy.save); see data.numpy.
local data = require "dpy.data"

local M = {}

M.options = data.array_options("numpy")

--- numpy.load{dir, train = true, ...} -> dataset (data.numpy)
M.load = data.numpy

M.spec = data.component { name = "numpy", options = M.options, load = M.load,
  doc = "uint8 or float32 images and integer labels from .npz / .npy files; ctx.train selects the split" }

return M
