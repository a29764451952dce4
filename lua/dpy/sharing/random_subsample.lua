--- Sharing random_subsample (DecentralizePy's SubSampling): each round a node sends the values of
-- a seeded random k = round(alpha * n) of its coordinates. No index travels: every receiver draws
-- the same indices from the run's seed, the sender's uid and the round (dpy.sparse.seed). The
-- receiver averages the partial models as topk's does (fill).
local registry = require "dpy.registry"
local sparse = require "dpy.sparse"

return registry.register {
  kind = "sharing", name = "random_subsample",
  payload_bound = sparse.payload_bound,   -- its own payload: the chain runs on it
  options = {
    alpha = { type = "number", above = 0, max = 1, default = 0.1, doc = "the fraction of the model sent each round" },
    values = { type = "string", one_of = { "float32", "float16", "bfloat16" }, default = "float32",
               doc = "how the sent values travel" },
    fill = { type = "string", one_of = { "last", "own" }, default = "last",
             doc = "a coordinate not received: the neighbour's last known value, or the receiver's own" },
  },
  doc = "a seeded random fraction of the model's values; the receivers regenerate the indices",
  new = function(o, node)
    local n = node.model:numel()
    local k = sparse.count(o.alpha, n)
    local seed = node.cfg.seed
    local rule = { payload = "uint8" }
    --- rule.indices(uid, r) -> the indices node uid sends in round r
    function rule.indices(uid, r) return sparse.sample(sparse.seed(seed, uid, r), n, k) end
    function rule.bound(m) return sparse.bound(m, o.values, true) end
    function rule.encode(nd, t, r)
      local idx <close> = rule.indices(nd.uid, r)
      local values <close> = t:index_select(0, idx)
      return sparse.pack(n, nil, values, o.values)
    end
    function rule.decode(_, peer, r, payload)
      local m, idx, values = sparse.unpack(payload, n)
      if not m then return nil, idx end
      if idx or values:numel() ~= k then
        if idx then idx:free() end
        local got = values:numel()
        values:free()
        return nil, idx and "indices travel, but a random subsample's are drawn by the receiver"
               or string.format("%d values, but alpha = %g keeps %d", got, o.alpha, k)
      end
      return sparse.message(peer, m, rule.indices(peer, r), values)
    end
    local copies
    rule.combine, copies = sparse.averager(node, o.fill)
    function rule.checkpoint() return { copies = sparse.save_copies(copies) } end
    function rule.restore(_, t) sparse.restore_copies(copies, t.copies) end
    return rule
  end,
}
