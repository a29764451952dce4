--- Sharing topk_plus_random (DecentralizePy's TopKPlusRandom): topk's rule (dpy.sparse.partial:
-- error feedback, (index, current value) pairs, the receiver's fill), but of the k = round(alpha * n)
-- coordinates sent each round only k - round(random * k) are those of largest accumulated change;
-- the rest are a seeded random draw among the others (dpy.sparse.seed: the run's seed, the sender's
-- uid, the round), so that every coordinate is sent now and then whatever its change. The indices
-- travel. DecentralizePy draws its random half from all coordinates, with replacement (its
-- np.delete's result is dropped), so its halves may overlap; here they never do.
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"
local sparse = require "dpy.sparse"

local OPTIONS = { random = { type = "number", min = 0, max = 1, default = 0.5,
                             doc = "the part of the k coordinates drawn at random (the rest: the top-k)" } }
for k, v in pairs(sparse.PARTIAL_OPTIONS) do OPTIONS[k] = v end

return registry.register {
  kind = "sharing", name = "topk_plus_random", options = OPTIONS,
  payload_bound = sparse.payload_bound,   -- its own payload: the chain runs on it
  doc = "topk of the accumulated change for part of the k coordinates, a seeded random draw of the others for the rest",
  new = function(o, node)
    local seed = node.cfg.seed
    return sparse.partial(o, node, nil, function(residual, k, uid, r)
      local drawn, n = math.floor(o.random * k + 0.5), residual:numel()
      if drawn == k then return sparse.sample(sparse.seed(seed, uid, r), n, k) end
      local top = sparse.topk(residual, k - drawn)
      if drawn == 0 then return top end
      local keep <close> = tensor.ones(n)
      sparse.fill_at_(keep, top, 0)
      local others_mask <close> = keep:gt(0)
      local all <close> = tensor.arange(n)
      local others <close> = all:masked_select(others_mask)
      local at <close> = sparse.sample(sparse.seed(seed, uid, r), others:numel(), drawn)
      local pick <close> = others:index_select(0, at)
      local both <close> = tensor.cat({ top, pick })
      top:free()
      local idx, order = both:sort()
      order:free()
      return idx
    end)
  end,
}
