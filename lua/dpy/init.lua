--- dpy: the entry point. `local dpy = require "dpy"` gives the modules, loaded on first use:
-- dpy.tensor, dpy.nn, dpy.optim, dpy.data, dpy.partition, dpy.trainer, dpy.registry, ...
local M = { version = "0.1.0" }

setmetatable(M, {
  __index = function(t, k)
    local ok, mod = pcall(require, "dpy." .. k)
    if not ok then return nil end
    rawset(t, k, mod)
    return mod
  end,
})

return M
