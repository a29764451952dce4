--- Sharing choco (CHOCO-SGD, Koloskova, Stich and Jaggi, ICML 2019, Algorithm 2): every node keeps
-- public copies x̂ of itself and of each neighbour. Each round it sends q = Q(x - x̂_self), the
-- compressed difference; every holder of a copy adds q to it (x̂_j += q_j, the sender too, with the
-- decoded q, so that all copies of x̂_j stay bitwise equal); then the node mixes with step size
-- gamma: x += gamma * sum_j w_ij (x̂_j - x̂_self) (Metropolis-Hastings weights). Q: "topk" (the
-- k = round(alpha * n) largest |x - x̂|), "random" (a seeded random k, no index travels), or
-- "quantize" (every value, uniform asymmetric quantization). The copies start from the initial
-- model, which every node shares (start = "zero": from zero, as the paper and DecentralizePy do).
-- Copies stay equal only if every message arrives: a static graph, and no dropped peers.
local registry = require "dpy.registry"
local sparse = require "dpy.sparse"
local codec = require "dpy.codec.core"

local SCHEMA = {
  gamma = { type = "number", above = 0, max = 1, default = 0.5, doc = "the consensus step size" },
  compressor = { type = "string", one_of = { "topk", "random", "quantize" }, default = "topk", doc = "Q" },
  alpha = { type = "number", above = 0, max = 1, default = 0.01, doc = "topk, random: the fraction sent" },
  values = { type = "string", one_of = { "float32", "float16", "bfloat16" }, default = "float32",
             doc = "topk, random: how the values travel" },
  bits = { type = "integer", min = 1, max = 16, default = 8, doc = "quantize: bits per value (1..8 or 16)" },
  chunk = { type = "integer", min = 0, default = 0, doc = "quantize: values per scale (0: per vector)" },
  start = { type = "string", one_of = { "model", "zero" }, default = "model",
            doc = "the public copies' start: the shared initial model, or zero" },
}

-- Q(d) for node uid in round r: the payload, and its parts for the metrics.
local function compress(o, n, k, seed, uid, r, d)
  if o.compressor == "quantize" then
    local payload = codec.quantize(d, o.bits, o.chunk)
    local header = payload:nbytes() - (n * o.bits + 7) // 8   -- the fixed header and the chunks' scales
    return payload, { header = header, indices = 0, values = payload:nbytes() - header, fraction = 1 }
  end
  local idx <close> = o.compressor == "topk" and sparse.topk(d, k) or sparse.sample(sparse.seed(seed, uid, r), n, k)
  local values <close> = d:index_select(0, idx)
  return sparse.pack(n, o.compressor == "topk" and idx or nil, values, o.values)
end

-- The message q of payload (sent by peer in round r), or nil, err.
local function decompress(o, n, k, seed, peer, r, payload)
  if o.compressor == "quantize" then
    local q, err = codec.dequantize(payload, n)
    if not q then return nil, err end
    if q:numel() ~= n then
      local got = q:numel()
      q:free()
      return nil, string.format("%d values, but this model has %d", got, n)
    end
    return sparse.message(peer, n, nil, q)
  end
  local m, idx, values = sparse.unpack(payload, n)
  if not m then return nil, idx end
  if values:numel() ~= k or (idx == nil) ~= (o.compressor == "random") then
    if idx then idx:free() end
    values:free()
    return nil, string.format("not a %s payload of %d values", o.compressor, k)
  end
  return sparse.message(peer, n, idx or sparse.sample(sparse.seed(seed, peer, r), n, k), values)
end

return registry.register {
  kind = "sharing", name = "choco", options = SCHEMA,
  payload_bound = sparse.payload_bound,   -- its own payload: the chain runs on it
  doc = "CHOCO-SGD: compressed differences to public copies, mixed with step size gamma",
  validate = function(o)
    if o.compressor == "quantize" and not ((o.bits >= 1 and o.bits <= 8) or o.bits == 16) then
      return "bits must be 1..8 or 16, got " .. o.bits
    end
  end,
  new = function(o, node)
    -- a neighbour's copy stays in step only if this node gets every message it sends: not under a
    -- graph drawn anew each round, nor Epidemic Learning's (node.graph is then absent)
    if not node.graph or node.graph.dynamic then
      error("choco keeps a public copy per neighbour: it needs a static graph", 0)
    end
    local initial = node.model:get_flat()
    local n = initial:numel()
    local k = sparse.count(o.alpha, n)
    local seed = node.cfg.seed
    if o.start == "zero" then initial:zero_() end
    -- public[uid]: the public copy x̂ of node uid (this node's own included)
    local rule = { payload = "uint8", public = { [node.uid] = initial:clone() } }
    function rule.bound(m)
      if o.compressor == "quantize" then return codec.quantize_size(m, o.bits, o.chunk) end
      return sparse.bound(m, o.values, o.compressor == "random")
    end
    function rule.encode(nd, t, r)
      local d <close> = t - rule.public[nd.uid]
      local payload, parts = compress(o, n, k, seed, nd.uid, r, d)
      if rule.mine then rule.mine:free() end
      -- what every receiver will decode: the sender applies exactly that to its own copy
      rule.mine = assert(decompress(o, n, k, seed, nd.uid, r, payload))
      return payload, parts
    end
    function rule.decode(_, peer, r, payload) return decompress(o, n, k, seed, peer, r, payload) end
    function rule.combine(nd, _, got, weights)
      local own = rule.public[nd.uid]
      if rule.mine then
        rule.mine:apply(own, true)
        rule.mine:free()
        rule.mine = nil
      end
      for _, m in ipairs(got) do
        local hat = rule.public[m.peer] or initial:clone()
        rule.public[m.peer] = m:apply(hat, true)
      end
      local x = nd.model:get_flat()
      for i, m in ipairs(got) do
        local diff <close> = rule.public[m.peer] - own
        x:add_(diff, o.gamma * weights[i])
      end
      nd.model:set_flat(x)
      x:free()
    end
    function rule.checkpoint() return { public = rule.public } end   -- at a round's end: no q pending
    function rule.restore(_, t)
      rule.public = {}
      for uid, hat in pairs(t.public) do rule.public[uid] = hat:clone() end
    end
    return rule
  end,
}
