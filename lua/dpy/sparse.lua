--- dpy.sparse: what the sparsifying sharing rules (sharing/topk, random_subsample, choco) share —
-- their payload (the sparse codec of dpy.sparse.core), the message a receiver decodes it to, the
-- seed of a random subsample, and the averaging of partial models.
local core = require "dpy.sparse.core"
local tensor = require "dpy.tensor"

local M = setmetatable({}, { __index = core })   -- core's functions, and the helpers below

local Message = {}
Message.__index = Message

--- A received partial vector: peer, n (its dense length), idx (int64, nil: dense values), values.
function M.message(peer, n, idx, values)
  return setmetatable({ peer = peer, n = n, idx = idx, values = values }, Message)
end

function Message:free()
  if self.idx then self.idx:free() end
  self.values:free()
end

--- m:apply(dst [, add]): dst[idx] = values (add: +=), in place; a dense message sets (adds) it all.
function Message:apply(dst, add)
  if not self.idx then
    if add then dst:add_(self.values) else dst:copy_(self.values) end
  elseif add then
    core.scatter_add_(dst, self.idx, self.values)
  else
    core.scatter_(dst, self.idx, self.values)
  end
  return dst
end

--- sparse.pack(n, idx | nil, values, vtype) -> payload, parts: the bytes the codec spends
-- ({ header =, indices =, values =, fraction = k / n }) for the round's metrics.
function M.pack(n, idx, values, vtype)
  local payload, header, indices, bytes = core.encode(n, idx, values, vtype)
  local fraction = n > 0 and values:numel() / n or 0
  return payload, { header = header, indices = indices, values = bytes, fraction = fraction }
end

--- sparse.unpack(payload, n) -> n, idx | nil, values; or nil, err when the payload is malformed or
-- is not a vector of exactly n values.
function M.unpack(payload, n)
  local got, idx, values = core.decode(payload, n)
  if not got then return nil, idx end
  if got ~= n then
    if idx then idx:free() end
    values:free()
    return nil, string.format("a vector of %d values, but this model has %d", got, n)
  end
  return got, idx, values
end

--- sparse.count(alpha, n) -> the values a fraction alpha of n keeps: round(alpha * n), at least 1,
-- as DecentralizePy's Python round() takes it: a half goes to the even neighbour (2.5 -> 2).
function M.count(alpha, n)
  local x = alpha * n
  local k = math.floor(x + 0.5)
  if k - x == 0.5 and k % 2 == 1 then k = k - 1 end   -- a tie, rounded up to an odd k
  return math.min(n, math.max(1, k))
end

--- sparse.seed(seed, uid, r) -> the seed of node uid's random subsample in round r: what the
-- sender draws and every receiver regenerates.
function M.seed(seed, uid, r)
  local s, u, k = math.floor(seed), math.floor(uid), math.floor(r)   -- integers (wrapping), never floats
  return ((s * 1000003 + u) * 1000033 + k) * 0x9e3779b9 + 1
end

--- sparse.averager(node, fill [, domain]) -> a combine(node, r, got, weights, own_weight) over
-- partial models, and its copies ({ [peer] = vector }, for checkpoints). A coordinate a neighbour
-- did not send takes its last known value (fill = "last": a copy per neighbour, starting from the
-- initial model, which every node shares) or the receiver's own (fill = "own", as DecentralizePy's
-- PartialModel does). domain (wavelet, fft):
-- the messages hold coefficients of domain.forward(model); the average is taken there and the
-- model set to its domain.inverse.
function M.averager(node, fill, domain)
  local initial = node.model:get_flat()
  if domain then
    local c = domain.forward(initial)
    initial:free()
    initial = c
  end
  local copies = {}
  return function(nd, _, got, weights, own_weight)
    local mixed, own = {}, nil
    if (fill == "own" or domain) and #got > 0 then
      own = nd.model:get_flat()
      if domain then
        local c = domain.forward(own)
        own:free()
        own = c
      end
    end
    for i, m in ipairs(got) do
      local base
      if fill == "own" then
        base = own:clone()
      else
        base = copies[m.peer] or initial:clone()
        copies[m.peer] = base
      end
      mixed[i] = m:apply(base)
    end
    if domain and own then
      local sum <close> = own:mul(own_weight)
      for i, t in ipairs(mixed) do sum:add_(t, weights[i]) end
      local x <close> = domain.inverse(sum)
      nd.model:set_flat(x)
    elseif not domain then
      nd.model:mix(own_weight, mixed, weights)
    end
    if own then own:free() end
    if fill == "own" then
      for _, t in ipairs(mixed) do t:free() end
    end
  end, copies
end

-- The state of an averager's copies for a checkpoint, and back.
local function save_copies(copies)
  local out = {}
  for peer, t in pairs(copies) do out[peer] = t end
  return out
end

local function restore_copies(copies, saved)
  for peer in pairs(copies) do copies[peer] = nil end
  for peer, t in pairs(saved or {}) do copies[peer] = t:clone() end
end
M.save_copies, M.restore_copies = save_copies, restore_copies

--- sparse.partial(o, node [, domain]) -> the rule of topk (and, with a domain, of wavelet and
-- fft): each round the k = round(o.alpha * m) of the m coordinates (of the model, or of its
-- domain.forward) whose accumulated change is largest (o.accumulate: added up since a coordinate
-- was last sent, error feedback), sent as (index, current value) pairs in o.values; the receiver
-- averages per o.fill. rule.residual: what is left to send; rule.sent: the accumulated change the
-- last encoding sent (at its indices). select(residual, k, uid, r) -> the sorted indices to send
-- (default: the top k, core.topk).
function M.partial(o, node, domain, select)
  local function coefficients(t)
    if not domain then return t end
    return domain.forward(t)
  end
  local base = coefficients(node.model:get_flat())   -- the model after the last combine
  local m = base:numel()
  local k = M.count(o.alpha, m)
  local rule = { payload = "uint8", residual = base:mul(0) }
  function rule.bound() return core.bound(m, o.values) end
  function rule.encode(nd, t, r)
    local c <close> = domain and coefficients(t) or nil
    local x = c or t
    local change <close> = x - base
    if o.accumulate then rule.residual:add_(change) else rule.residual:copy_(change) end
    local idx <close> = select and select(rule.residual, k, nd.uid, r) or core.topk(rule.residual, k)
    local values <close> = x:index_select(0, idx)
    if rule.sent then rule.sent:free() end
    rule.sent = rule.residual:index_select(0, idx)
    core.fill_at_(rule.residual, idx, 0)
    return M.pack(m, idx, values, o.values)
  end
  function rule.decode(_, peer, _, payload)
    local got, idx, values = M.unpack(payload, m)
    if not got then return nil, idx end
    return M.message(peer, got, idx, values)
  end
  local average, copies = M.averager(node, o.fill, domain)
  function rule.combine(nd, r, got, weights, own_weight)
    average(nd, r, got, weights, own_weight)
    base:free()
    base = coefficients(nd.model:get_flat())
  end
  function rule.checkpoint() return { base = base, residual = rule.residual, copies = save_copies(copies) } end
  function rule.restore(_, t)
    base:free()
    base = t.base:clone()
    rule.residual:copy_(t.residual)
    restore_copies(copies, t.copies)
  end
  return rule
end

--- sparse.upload(name, o, node) -> a FedAvg client's sparse upload under sharing rule name ("topk" or
-- "random_subsample", options o), in the shape exchange.send_model takes for a rule (payload, bound,
-- encode, decode), and its state for checkpoints. up.global must hold the model the server sent this
-- round. Each upload carries k = round(o.alpha * n) coordinates: topk's are those of largest
-- accumulated change since the server's model (o.accumulate: the change not sent in earlier rounds
-- added, error feedback), random_subsample's a seeded random k (no index travels). The value sent at a
-- coordinate is the client's model there plus its change withheld in earlier rounds: the model the
-- server would have got had nothing been withheld (with everything sent, the client's model as it is).
-- up.residual: what is left to send; up.sent: the accumulated change the last upload sent.
function M.upload(name, o, node)
  local n = node.model:numel()
  local k = M.count(o.alpha, n)
  local random = name == "random_subsample"
  local seed = node.cfg.seed
  local up = { payload = "uint8" }
  if not random then up.residual, up.withheld = tensor.zeros(n), tensor.zeros(n) end
  function up.bound(m) return core.bound(m, o.values, random) end
  function up.encode(nd, x, r)
    if random then
      local idx <close> = M.sample(M.seed(seed, nd.uid, r), n, k)
      local values <close> = x:index_select(0, idx)
      return M.pack(n, nil, values, o.values)
    end
    local change <close> = x - up.global
    if o.accumulate then up.withheld:copy_(up.residual) end   -- else nothing is carried over: it stays 0
    if o.accumulate then up.residual:add_(change) else up.residual:copy_(change) end
    local idx <close> = core.topk(up.residual, k)
    local values <close> = x:index_select(0, idx)
    local earlier <close> = up.withheld:index_select(0, idx)
    values:add_(earlier)
    if up.sent then up.sent:free() end
    up.sent = up.residual:index_select(0, idx)
    core.fill_at_(up.residual, idx, 0)
    return M.pack(n, idx, values, o.values)
  end
  function up.decode(_, peer, r, payload)
    local got, idx, values = M.unpack(payload, n)
    if not got then return nil, idx end
    if random and (idx or values:numel() ~= k) then
      if idx then idx:free() end
      local count = values:numel()
      values:free()
      return nil, idx and "indices travel, but a random subsample's are drawn by the receiver"
             or string.format("%d values, but alpha = %g keeps %d", count, o.alpha, k)
    end
    return M.message(peer, got, idx or M.sample(M.seed(seed, peer, r), n, k), values)
  end
  if not random then
    up.state = {
      checkpoint = function() return { residual = up.residual } end,
      restore = function(_, t) up.residual:copy_(t.residual) end,
    }
  end
  return up
end

--- sparse.federated_mean(g, got, counts) -> the FedAvg server's new model from its model g and the
-- clients' partial models got (messages) with their sample counts: at each coordinate the mean of
-- the values sent there, weighted by the counts of the clients that sent one; a coordinate nobody
-- sent keeps g's value. With every coordinate sent it is FedAvg's sum(count * x) / sum(count), the
-- same operations in the same order (bit for bit).
function M.federated_mean(g, got, counts)
  local sum, weight = g:mul(0), g:mul(0)
  for i, m in ipairs(got) do
    local full <close> = m:apply(g:mul(0))
    sum:add_(full, counts[i])
    local ones <close> = tensor.ones(m.values:numel())
    local mask <close> = M.message(m.peer, m.n, m.idx, ones):apply(g:mul(0))
    weight:add_(mask, counts[i])
  end
  local sent <close> = weight:gt(0)
  local mean <close> = sum / weight   -- nan where nobody sent: where() takes g's value there
  local out = tensor.where(sent, mean, g)
  sum:free()
  weight:free()
  return out
end

--- The options of topk, wavelet and fft.
--- sparse.payload_bound(cfg, values) -> the payload limit the sparse rules declare (their specs'
-- payload_bound, see dpy.payload): the config's chain at worst over a sparse payload of up to
-- twice the model's values (a transform's coefficients may outnumber them), float32 values with
-- their indices; choco's quantized payload is smaller.
function M.payload_bound(cfg, values)
  local chain = require("dpy.transforms").chain(cfg.transforms, { dtype = "uint8",
                                                                   bound = function(n) return core.bound(2 * n) end })
  return chain:encoded_bound(values)
end

M.PARTIAL_OPTIONS = {
  alpha = { type = "number", above = 0, max = 1, default = 0.1,
            doc = "the fraction of the coordinates sent each round" },
  accumulate = { type = "boolean", default = true,
                 doc = "add up the changes not sent (false: the round's change alone decides)" },
  values = { type = "string", one_of = { "float32", "float16", "bfloat16" }, default = "float32",
             doc = "how the sent values travel" },
  fill = { type = "string", one_of = { "last", "own" }, default = "last",
           doc = "a coordinate not received: the neighbour's last known value, or the receiver's own" },
}

return M
