--- Sharing topk (DecentralizePy's PartialModel): each round a node sends the k = round(alpha * n)
-- coordinates of its model whose accumulated change since they were last sent is largest in
-- magnitude (the change of each round's training, added up: what is not sent now is sent later),
-- as (index, current value) pairs in the sparse codec; the receiver averages the partial models
-- (dpy.sparse.averager: a coordinate not received keeps the neighbour's last known value, or the
-- receiver's own with fill = "own"). The rule itself is dpy.sparse.partial.
local registry = require "dpy.registry"
local sparse = require "dpy.sparse"

return registry.register {
  kind = "sharing", name = "topk", options = sparse.PARTIAL_OPTIONS,
  payload_bound = sparse.payload_bound,   -- its own payload: the chain runs on it
  doc = "top-k of the accumulated change since the last share (error feedback), as (index, value) pairs",
  new = function(o, node) return sparse.partial(o, node) end,
}
