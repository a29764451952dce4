--- Transform uniform_asymmetric_quantization: b bits per value, a scale and zero point per tensor or
-- per chunk (dpy.codec.core's quantize).
local codec = require "dpy.codec.core"
local registry = require "dpy.registry"

return registry.register {
  kind = "transform", name = "uniform_asymmetric_quantization",
  options = { bits = { type = "integer", default = 8, doc = "bits per value: 1..8 or 16",
                       check = function(b) if not ((b >= 1 and b <= 8) or b == 16) then
                         return "must be 1..8 or 16, got " .. b end end },
              chunk = { type = "integer", min = 0, default = 0, doc = "values per scale (0: per tensor)" } },
  doc = "b bits per value (1-8 or 16), a scale and zero point per tensor (chunk = 0) or per chunk "
        .. "of k values; at most half a step of error; +-Inf saturate, a NaN chunk stays NaN",
  new = function(o)
    local bits, chunk = o.bits, o.chunk
    return { label = string.format("uniform_asymmetric_quantization(bits=%d,chunk=%d)", bits, chunk),
             input = "float32",
             encode = function(t) return codec.quantize(t, bits, chunk) end,
             decode = function(b, _, max) return codec.dequantize(b, max and max // 4) end,
             bound = function(bytes) return codec.quantize_size(bytes // 4, bits, chunk) end }
  end,
}
