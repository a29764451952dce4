--- Sharing fft (JWINS, DecentralizePy's FFT): topk in the model's real-FFT domain (libtorch's rfft:
-- n/2 + 1 complex coefficients, kept as 2 (n/2 + 1) real values, re and im interleaved). The
-- k = round(alpha * m) real coefficients of largest accumulated change are sent as (index, value)
-- pairs, the receiver averages the coefficients (fill) and inverts the transform. DecentralizePy
-- selects whole complex coefficients by modulus; here the real and imaginary parts are chosen
-- independently.
local registry = require "dpy.registry"
local sparse = require "dpy.sparse"

return registry.register {
  kind = "sharing", name = "fft", options = sparse.PARTIAL_OPTIONS,
  payload_bound = sparse.payload_bound,   -- its own payload: the chain runs on it
  doc = "top-k of the accumulated change of the model's real-FFT coefficients (JWINS)",
  new = function(o, node)
    local n = node.model:numel()
    local domain = {
      forward = function(t) return sparse.rfft(t) end,
      inverse = function(c) return sparse.irfft(c, n) end,
    }
    return sparse.partial(o, node, domain)
  end,
}
