--- dpy.exchange: what every algorithm does to move vectors between nodes — send (the outgoing
-- modifiers, then the transform chain), receive (decode, or handle a dead or silent peer as
-- on_peer_failure says), the round's live neighbours, and training inside a compute slot.
-- Algorithms (lua/dpy/algorithms/*.lua, or a user's file) call these; a user's algorithm follows
-- the same contract.
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"
local options = require "dpy.options"
local host = require "dpy.host.core"
-- dpy.simclock, dpy.churn and dpy.random are required where a run that uses them needs them: a
-- node's Lua state holds what its run uses (without them, 18 KiB less of every node's heap)

local M = {}

M.MODEL = 0   -- channel of model (and gradient) vectors
M.COUNT = 1   -- fedavg: a client's sample count, beside its model
M.HEADER = 40   -- the bytes of a message's header on the wire (host/core/wire.h), as bytes_sent counts them

-- A payload rejected: a log line, and nil (the message is dropped; the peer stays).
local function reject(node, peer, r, why)
  node.log:write("round %d: rejected node %d's payload: %s", r, peer, why)
  node.rejected_payloads = (node.rejected_payloads or 0) + 1
  return nil
end

-- Decodes a received payload; nil and a log line when it was encoded by another chain or is
-- malformed (the message is dropped; the peer stays). codec: see M.receive.
local function decode(node, peer, r, x, encoding, codec)
  local chain = (codec or node).chain
  local why
  if encoding ~= chain.id then
    why = string.format("encoded by transform chain %08x, but this node decodes %08x (%s)",
                        encoding, chain.id, chain.id == 0 and "no transforms" or chain.label)
  else
    local v, err = chain:decode(x, node.model and node.model:numel())   -- nothing larger than ours
    local sharing = (codec or node).sharing
    if v and sharing and sharing.decode then   -- a rule's own payload, decoded by the rule
      local m
      m, err = sharing.decode(node, peer, r, v)
      v:free()   -- the received bytes (and the chain's output): the message holds its own tensors
      x:free()
      v = m
    end
    if v then return v end
    why = "malformed: " .. err
  end
  if x then x:free() end
  return reject(node, peer, r, why)
end

M.ABORT = '; stopping (on_peer_failure = "abort")'   -- the end of a node's error that a peer's failure stopped
local ABORTED = "(.*)" .. M.ABORT:gsub("%p", "%%%0") .. "$"

--- exchange.stopped_by(err) -> origin, cause: for a node's error that another node's failure caused
-- (on_peer_failure = "abort"), the uid of the node that failed first and its error; else nil.
function M.stopped_by(err)
  local origin, cause = err:match("^round %d+: peer (%d+) failed: " .. ABORTED)
  if not origin then origin, cause = err:match("^round %d+: peer %d+ stopped after peer (%d+) failed: " .. ABORTED) end
  return tonumber(origin), cause
end

--- exchange.failure(said) -> what a receiver says of a peer that failed with the error said:
-- "failed: <said>", or when a failure of another node stopped that peer, that node and its cause
-- ("stopped after peer 2 failed: <its error>"), so that a failure passed along a graph's nodes
-- stays one step long instead of nesting the words of each.
function M.failure(said)
  local origin, cause = M.stopped_by(said)
  if origin then return string.format("stopped after peer %d failed: %s", origin, cause) end
  return "failed: " .. said
end

-- What a receiver says of a peer whose message did not come: why ("dead" or "timeout") and what
-- the fabric knows of it (a dead peer's own word: "" when it finished, else its error). A peer
-- that finished did its rounds: its message of this one was lost (faults.drop) and never comes.
local function absence(cfg, why, said)
  if why == "dead" then
    if said == "" then return "has finished; its message of the round never came" end
    return said and M.failure(said) or "is gone"
  end
  return string.format("sent nothing for %g s", cfg.peer_timeout)
end

--- exchange.deadline(node [, round]) -> when a round's wait for its peers ends (peer_timeout from
-- now; with round true, round_timeout when set): the peers of a round are waited for together, not
-- one peer_timeout after another.
function M.deadline(node, round)
  local cfg = node.cfg
  return host.clock() + (round and not cfg.sim_clock and cfg.round_timeout or cfg.peer_timeout)
end

--- exchange.timeout(node, deadline) -> the seconds left until deadline (peer_timeout without one)
function M.timeout(node, deadline)
  if not deadline then return node.cfg.peer_timeout end
  return math.max(0, deadline - host.clock())
end

--- exchange.receive(node, peer, r [, deadline]) -> the float32 vector peer sent for round r,
-- decoded; or nil when the peer is dropped (on_peer_failure = "continue") or its payload rejected.
-- Raises when the peer failed and on_peer_failure is "abort". deadline (exchange.deadline) bounds
-- the wait; without one it is peer_timeout. With missable and round_timeout set, a peer silent
-- until the deadline only misses the round (nil; it stays): its message, if it comes, is late; so
-- does one that has finished (its rounds done) without its message coming (lost: it never comes).
-- codec ({ chain =, sharing = }) decodes in place of the node's chain and rule (fedavg's sparse
-- uploads: the server's own model goes the other way dense).
function M.receive(node, peer, r, deadline, missable, codec)
  local cfg = node.cfg
  local x, why, said = node.endpoint:recv(peer, M.MODEL, r, M.timeout(node, deadline), (codec or node).chain.wire_dtype)
  if x then
    local v = decode(node, peer, r, x, why, codec)
    if v and node.received then node.received[peer] = v:clone() end   -- a client attached (dpy.attach.node)
    if v and node.simclock.simulated then return M.arrived(node, peer, r, v, deadline) end
    return v
  end
  if why == "malformed" then return reject(node, peer, r, "malformed: " .. said) end
  local finished = why == "dead" and said == ""   -- its message was lost: it can come no more
  if (why == "timeout" or finished) and missable and cfg.round_timeout and not cfg.sim_clock then
    node.log:write("round %d: peer %d missed the round's deadline (round_timeout %g s%s)", r, peer,
                   cfg.round_timeout, finished and "; it has finished" or "")
    return nil
  end
  local what = absence(cfg, why, said)
  if cfg.on_peer_failure == "abort" then error(string.format("round %d: peer %d %s", r, peer, what) .. M.ABORT, 0) end
  node.log:write("round %d: peer %d %s; continuing without it", r, peer, what)
  node.dropped = node.dropped or {}
  node.dropped[peer] = true
  return nil
end

--- exchange.arrived(node, peer, r, v, deadline) -> v, when peer's model v arrives in simulated time
-- by the round's deadline (its clock, sent beside it, says when it left); else nil (late: freed,
-- counted).
function M.arrived(node, peer, r, v, deadline)
  local t = node.endpoint:recv(peer, require("dpy.simclock").CLOCK, r, M.timeout(node, deadline), "float64")
  if t then
    local stamp = t:totable()
    t:free()
    if node.simclock:accept(peer, stamp[1], stamp[2]) then return v end
  end
  node.log:write("round %d: peer %d's model %s", r, peer,
                 t and "came after the simulated deadline (round_timeout)" or "came without its clock")
  v:free()
  return nil
end

--- exchange.send(node, peer, r, t [, channel]): t as it is, to peer (a uid or a list of uids:
-- they share one copy of the bytes); a failed send raises or is logged, per on_peer_failure.
-- chain: the one that encoded t (default: the node's).
function M.send(node, peer, r, t, channel, chain)
  local ok, err = node.endpoint:send(peer, channel or M.MODEL, r, t, channel and 0 or (chain or node.chain).id)
  if not ok then
    local dead, said = err:match("^(peer %d+) failed: (.*)$")   -- its own word, when it gave one
    if dead then err = dead .. " " .. M.failure(said) end
    if node.cfg.on_peer_failure == "abort" then error(string.format("round %d: %s", r, err) .. M.ABORT, 0) end
    node.log:write("round %d: send failed (%s); continuing", r, err)
  end
end

--- exchange.modified(node, flat, r) -> what the node shares of flat: the actions' outgoing
-- modifiers applied in order (flat itself when there are none; else a new tensor).
function M.modified(node, flat, r)
  local t = flat
  for _, m in ipairs(node.modifiers) do
    local u = m.modify(node, t, r)
    if not tensor.is_tensor(u) then
      error(string.format("round %d: action '%s': outgoing returned %s, not a dpy.Tensor", r, m.action,
                          options.show(u)), 0)
    end
    if u:numel() ~= flat:numel() or u:dtype() ~= flat:dtype() then   -- every receiver would refuse it
      error(string.format("round %d: action '%s': outgoing returned %d %s values, the model has %d %s values", r,
                          m.action, u:numel(), u:dtype(), flat:numel(), flat:dtype()), 0)
    end
    if t ~= flat and u ~= t then t:free() end
    t = u
  end
  return t
end

-- Round r's sample of the n = nodes - 1 clients (uids 1 .. n): a seeded k = fraction x n of them
-- (at least 1) as a set, or nil when k is every client. Floyd's algorithm draws k times, whatever
-- n: every node asks each round, and a shuffle of every client was O(nodes) a node (8,192 nodes,
-- 10 %: 1.5 ms a node a round).
local function sample(cfg, r)
  local n = cfg.nodes - 1
  local k = math.max(1, math.floor(cfg.fraction * n + 0.5))
  if k >= n then return nil, n end
  local rng, set = require("dpy.random").new(cfg.seed * 7919 + r), {}
  for j = n - k + 1, n do
    local t = rng:int(j) + 1   -- in 1 .. j: j itself when t is taken already
    set[set[t] and j or t] = true
  end
  return set, n
end

--- exchange.sampled(cfg, r) -> the clients (uids 1 .. nodes - 1) a server samples in round r, a
-- seeded fraction, sorted: the same on every node.
function M.sampled(cfg, r)
  local set, n = sample(cfg, r)
  local chosen = {}
  if not set then
    for u = 1, n do chosen[u] = u end
    return chosen
  end
  for u in pairs(set) do chosen[#chosen + 1] = u end
  table.sort(chosen)
  return chosen
end

--- exchange.is_sampled(cfg, r, uid) -> whether client uid is in round r's sample (exchange.sampled)
function M.is_sampled(cfg, r, uid)
  local set = sample(cfg, r)
  return not set or set[uid] == true
end

-- What a node sends of flat: the actions' outgoing modifiers, then the transform chain. Each
-- step's bytes in and out go to the metrics (once per round).
local function encode(node, flat, r, codec)
  local t = M.modified(node, flat, r)
  local sizes = node.encoded_round ~= r and {} or nil
  local sharing, chain = (codec or node).sharing, (codec or node).chain
  if sharing and sharing.encode then   -- a rule's own payload (topk, choco): its parts to the metrics
    local own, parts = sharing.encode(node, t, r)
    if t ~= flat then t:free() end
    t = own
    for _, part in ipairs(sizes and parts and { "header", "indices", "values" } or {}) do
      node.metrics:add("sharing_" .. part .. "_bytes", r, parts[part])
    end
    if sizes and parts then node.metrics:add("sharing_fraction", r, parts.fraction) end
  end
  local payload = chain:encode(t, sizes)
  if payload ~= t and t ~= flat then t:free() end
  for i, size in ipairs(sizes or {}) do
    node.metrics:add(chain:metric(i, "in"), r, size[1])
    node.metrics:add(chain:metric(i, "out"), r, size[2])
  end
  node.encoded_round = r
  return payload
end

--- exchange.model_flat(node) -> the node's model as one flat vector to send: the parameters
-- themselves (model:share_flat, local receivers read them as they are) when nothing rewrites the
-- vector on the way (no outgoing modifier, no payload of the sharing rule's own), else a copy.
-- Pair it with exchange.combine, which copies the model on write while a receiver still reads it.
function M.model_flat(node)
  if #node.modifiers == 0 and not node.sharing.encode then return node.model:share_flat() end
  return node.model:get_flat()
end

--- exchange.combine(node, r, got, weights, own_weight): the sharing rule's combine. A rule that
-- may write the model other than by model:mix or model:set_flat (which copy on write) gets it
-- to itself first; the average rule (mixes = true) writes its sum straight into a new buffer.
function M.combine(node, r, got, weights, own_weight)
  if not node.sharing.mixes then node.model:own_flat() end
  node.sharing.combine(node, r, got, weights, own_weight)
end

--- exchange.send_model(node, peer, r, flat [, codec]): what the node shares of flat (modifiers, then
-- transforms) to peer (a uid or a list), then frees what encoding made. codec: see M.receive.
function M.send_model(node, peer, r, flat, codec)
  local payload = encode(node, flat, r, codec)
  M.send(node, peer, r, payload, nil, codec and codec.chain)
  local bytes = payload:nbytes() + M.HEADER
  if payload ~= flat then payload:free() end
  if node.simclock.simulated then   -- when it left and its bytes, for the receivers' clocks
    local stamp = node.simclock:stamp(bytes)
    M.send(node, peer, r, stamp, require("dpy.simclock").CLOCK)
    stamp:free()
  end
end

-- g without the nodes absent in round r (churn): its adjacency lists filtered as they are asked for.
local function without_absent(cfg, g, r)
  local churn = require "dpy.churn"
  local adj = setmetatable({}, { __index = function(t, u)
    local list = churn.present(cfg, g.adj[u], r)
    t[u] = list
    return list
  end })
  return setmetatable({ adj = adj }, { __index = g })
end

--- exchange.neighbours(node, r) -> the round's graph (without the nodes absent in round r, see
-- dpy.churn), and its neighbours of node still alive (a dynamic graph is derived anew each round,
-- by every node alone).
function M.neighbours(node, r)
  local g = node.graph
  if g.dynamic then
    g = registry.build("graph", node.cfg.graph, require("dpy.layout").graph_context(node.cfg, r))
  end
  if node.cfg.churn then g = without_absent(node.cfg, g, r) end
  local live = {}
  for _, v in ipairs(g.adj[node.uid]) do
    if not (node.dropped and node.dropped[v]) then live[#live + 1] = v end
  end
  return g, live
end

--- exchange.absent(node, r) -> whether node is absent in round r (dpy.churn): then it does nothing
-- this round (the algorithm returns at once) and holds no compute slot. With churn, every node's
-- `absent` series says 1 or 0 each round.
function M.absent(node, r)
  if not node.cfg.churn then return false end
  local churn = require "dpy.churn"
  local out = churn.absent(node.cfg, node.uid, r)
  node.metrics:add("absent", r, out and 1 or 0)
  if out then
    node.endpoint:release()
    node.exchange_seconds = 0
    if r == 1 or not churn.absent(node.cfg, node.uid, r - 1) then
      local back = churn.rejoin(node.cfg, node.uid, r)
      node.log:write("round %d: absent (churn) %s", r, back and "until round " .. back or "to the end")
    end
  end
  return out
end

--- exchange.train(node, steps) -> mean loss, seconds: trains in a compute slot (acquired unless
-- already held) and keeps it: the caller releases it once its compute is done. A straggler (see
-- dpy.simclock) takes its slowdown times as long: on the simulated clock, or in real time by
-- waiting (without the slot) after its training. With reset_optimizer the optimizer's state goes
-- first (DecentralizePy's reset_optimizer).
function M.train(node, steps)
  node.endpoint:acquire(node.round)
  node.model:own_flat()   -- the optimizer writes the parameters in place: not what a receiver reads
  if node.cfg.reset_optimizer then node.optimizer:reset() end
  local t0 = host.clock()
  local loss = node.trainer:run(steps)
  M.straggle(node, steps, t0)
  return loss, host.clock() - t0
end

--- exchange.straggle(node, steps, t0): a straggler's slowdown of the steps it computed since t0,
-- holding the round's slot (what train does after its steps; ps's workers call it themselves)
function M.straggle(node, steps, t0)
  local clock = node.simclock
  local factor = clock:slowdown(node.round)
  if clock.simulated then
    clock:trained(steps, node.round)
  elseif factor > 1 then
    node.endpoint:release()
    host.sleep((factor - 1) * (host.clock() - t0))
    node.endpoint:acquire(node.round)
  end
end

return M
