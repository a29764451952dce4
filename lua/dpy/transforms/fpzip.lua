--- Transform fpzip: fpzip compression of float32 values, lossless or keeping some bits of each
-- (dpy.codec.core).
local codec = require "dpy.codec.core"
local registry = require "dpy.registry"

return registry.register {
  kind = "transform", name = "fpzip",
  options = { precision = { type = "integer", default = 0, doc = "bits kept per value: 0 (lossless) or 2..32",
                            check = function(p) if not (p == 0 or (p >= 2 and p <= 32)) then
                              return "must be 0 (lossless) or 2..32, got " .. p end end } },
  doc = "fpzip compression of float32 values: lossless (precision 0) or keeping 2-32 bits of each",
  new = function(o)
    local precision = o.precision
    return { label = string.format("fpzip(precision=%d)", precision), input = "float32",
             encode = function(t) return codec.fpzip(t, precision) end,
             decode = function(b, _, max) return codec.unfpzip(b, max and max // 4) end,
             bound = function(bytes) return codec.fpzip_bound(bytes // 4) end }
  end,
}
