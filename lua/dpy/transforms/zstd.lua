--- Transform zstd: zstd compression of the payload bytes (dpy.codec.core).
local codec = require "dpy.codec.core"
local registry = require "dpy.registry"

return registry.register {
  kind = "transform", name = "zstd",
  options = { level = { type = "integer", min = -7, max = 22, default = 3, doc = "compression level" } },
  doc = "zstd compression of the payload bytes (level 1-19, default 3)",
  new = function(o)
    local level = o.level
    return { label = string.format("zstd(level=%d)", level), input = "any",
             encode = function(t) return codec.zstd(t, level) end,
             decode = function(b, dtype, max) return codec.unzstd(b, dtype, max) end,
             bound = codec.zstd_bound }
  end,
}
