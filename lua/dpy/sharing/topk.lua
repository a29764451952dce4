--- Sharing topk (DecentralizePy's PartialModel): each round a node sends the k = round(alpha * n)
-- coordinates of its model whose accumulated change since they were last sent is largest in
-- magnitude (the change of each round's training, added up: what is not sent now is sent later),
-- as (index, current value) pairs in the sparse codec; the receiver averages the partial models
-- (dpy.sparse.averager: a coordinate not received keeps the neighbour's last known value, or the
-- receiver's own with fill = "own").
local registry = require "dpy.registry"
local sparse = require "dpy.sparse"

local SCHEMA = {
  alpha = { type = "number", above = 0, max = 1, default = 0.1, doc = "the fraction of the model sent each round" },
  accumulate = { type = "boolean", default = true,
                 doc = "add up the changes not sent (false: the round's change alone decides)" },
  values = { type = "string", one_of = { "float32", "float16", "bfloat16" }, default = "float32",
             doc = "how the sent values travel" },
  fill = { type = "string", one_of = { "last", "own" }, default = "last",
           doc = "a coordinate not received: the neighbour's last known value, or the receiver's own" },
}

return registry.register {
  kind = "sharing", name = "topk", options = SCHEMA,
  doc = "top-k of the accumulated change since the last share (error feedback), as (index, value) pairs",
  new = function(o, node)
    local base = node.model:get_flat()   -- the model after the last combine
    local n = base:numel()
    local k = sparse.count(o.alpha, n)
    local rule = { payload = "uint8", residual = base:mul(0) }
    function rule.bound(m) return sparse.bound(m, o.values) end
    function rule.encode(_, t, _)
      local change <close> = t - base
      if o.accumulate then rule.residual:add_(change) else rule.residual:copy_(change) end
      local idx <close> = sparse.topk(rule.residual, k)
      local values <close> = t:index_select(0, idx)
      if rule.sent then rule.sent:free() end
      rule.sent = rule.residual:index_select(0, idx)   -- the accumulated change this round sends
      sparse.fill_at_(rule.residual, idx, 0)
      return sparse.pack(n, idx, values, o.values)
    end
    function rule.decode(_, peer, _, payload)
      local m, idx, values = sparse.unpack(payload, n)
      if not m then return nil, idx end
      return sparse.message(peer, m, idx, values)
    end
    local average = sparse.averager(node, o.fill)
    function rule.combine(nd, r, got, weights, own_weight)
      average(nd, r, got, weights, own_weight)
      base:free()
      base = nd.model:get_flat()
    end
    return rule
  end,
}
