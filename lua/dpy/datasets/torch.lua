--- The torch dataset: images and labels from torch.save files (PyTorch >= 1.6, or dpy.tensor's
-- t:save): a tuple or list (images, labels), a dict of tensors, or one tensor a file; see data.torch.
local data = require "dpy.data"

local M = {}

M.options = data.array_options("torch")

--- torch.load{dir, train = true, ...} -> dataset (data.torch)
M.load = data.torch

M.spec = data.component { name = "torch", options = M.options, load = M.load,
  doc = "uint8 or float32 images and integer labels from torch.save files; ctx.train selects the split" }

return M
