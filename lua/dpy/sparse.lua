--- dpy.sparse: what the sparsifying sharing rules (sharing/topk, random_subsample, choco) share —
-- their payload (the sparse codec of dpy.sparse.core), the message a receiver decodes it to, the
-- seed of a random subsample, and the averaging of partial models.
local core = require "dpy.sparse.core"

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
  return payload, { header = header, indices = indices, values = bytes, fraction = n > 0 and values:numel() / n or 0 }
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

--- sparse.count(alpha, n) -> the values a fraction alpha of n keeps: round(alpha * n), at least 1
-- (DecentralizePy rounds the same way).
function M.count(alpha, n)
  return math.min(n, math.max(1, math.floor(alpha * n + 0.5)))
end

--- sparse.seed(seed, uid, r) -> the seed of node uid's random subsample in round r: what the
-- sender draws and every receiver regenerates.
function M.seed(seed, uid, r)
  local s, u, k = math.floor(seed), math.floor(uid), math.floor(r)   -- integers (wrapping), never floats
  return ((s * 1000003 + u) * 1000033 + k) * 0x9e3779b9 + 1
end

--- sparse.averager(node, fill) -> a combine(node, r, got, weights, own_weight) over partial
-- models. A coordinate a neighbour did not send takes its last known value (fill = "last": a copy
-- per neighbour, starting from the initial model, which every node shares) or the receiver's own
-- (fill = "own", as DecentralizePy's PartialModel does).
function M.averager(node, fill)
  local initial = node.model:get_flat()
  local copies = {}
  return function(nd, _, got, weights, own_weight)
    local mixed, own = {}, nil
    if fill == "own" and #got > 0 then own = nd.model:get_flat() end
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
    nd.model:mix(own_weight, mixed, weights)
    if own then
      own:free()
      for _, t in ipairs(mixed) do t:free() end
    end
  end
end

return M
