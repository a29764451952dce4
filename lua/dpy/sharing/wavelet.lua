--- Sharing wavelet (JWINS, DecentralizePy's Wavelet): topk in a wavelet domain. The model is
-- transformed by a discrete wavelet transform (GSL's, periodic, every level, the model zero-padded
-- to a power of two), the k = round(alpha * m) coefficients of largest accumulated change are sent
-- as (index, value) pairs, the receiver averages the coefficients (fill) and inverts the transform.
local registry = require "dpy.registry"
local sparse = require "dpy.sparse"

local options = { family = { type = "string", one_of = { "daubechies", "haar", "bspline" }, default = "daubechies",
                             doc = "the wavelet family (GSL)" },
                  member = { type = "integer", min = 1, max = 309, default = 4,   -- GSL's largest (bspline 309); C ints
                             doc = "the family's member: daubechies 4..20 even (4 is db2), haar 2, bspline 103, "
                                   .. "202, ..." } }
for k, v in pairs(sparse.PARTIAL_OPTIONS) do options[k] = v end

return registry.register {
  kind = "sharing", name = "wavelet", options = options,
  payload_bound = sparse.payload_bound,   -- its own payload: the chain runs on it
  doc = "top-k of the accumulated change of the model's wavelet coefficients (JWINS)",
  validate = function(o)
    local ok, err = pcall(sparse.wavelet, require("dpy.tensor").zeros(8), o.family, o.member)
    if not ok then return tostring(err):gsub("^[^:]*:%d+: ", "") end
  end,
  new = function(o, node)
    local n = node.model:numel()
    local domain = {
      forward = function(t) return sparse.wavelet(t, o.family, o.member) end,
      inverse = function(c) return sparse.unwavelet(c, n, o.family, o.member) end,
    }
    return sparse.partial(o, node, domain)
  end,
}
