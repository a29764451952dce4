--- Algorithm async: asynchronous gossip by push-sum (Kempe et al. 2003; with local SGD steps, as
-- Stochastic Gradient Push, Assran et al. 2019). There is no global round: a node's round is its
-- own iteration, and nothing waits for anyone until the end. Each iteration a node trains, then
-- pushes half of its mass — (w z / 2, w / 2) for its model z and push-sum weight w (1 at the
-- start) — to one graph neighbour it draws (seeded by the run seed, its uid and the iteration), and
-- absorbs whatever pushes have come so far (any number): z = (w z + sum x) / (w + sum w').
-- Mass is never lost or counted twice, whatever crosses: a push is a one-way transfer, no
-- exchange needs the other side's answer (pairwise averaging, as AD-PSGD's, would need an atomic
-- handshake). Every node can derive how many pushes each neighbour sends it in all, so after its
-- last iteration a node waits for the rest: at the end the sum of w z over the nodes is what it
-- was at the start, plus the training's updates. A node's k-th push to a neighbour travels as
-- fabric round k (one sequence per link). What a node has absorbed at an iteration depends on
-- timing: runs are not bit-identical from one to the next.
local registry = require "dpy.registry"
local random = require "dpy.random"
local tensor = require "dpy.tensor"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"

local M = {}

--- async.target(cfg, g, u, k) -> the neighbour node u pushes to at its iteration k
function M.target(cfg, g, u, k)
  local nbrs = g.adj[u]
  return nbrs[random.new((cfg.seed * 1000003 + u) * 1000003 + k):int(#nbrs) + 1]
end

local function send(node, st, r)
  local g = node.graph
  local v = math.tointeger(M.target(node.cfg, g, node.uid, r))
  st.sent[v] = (st.sent[v] or 0) + 1
  local half = node.model:get_flat()
  half:mul_(st.w / 2)
  exchange.send_model(node, v, st.sent[v], half)
  half:free()
  local w = tensor.new({ st.w / 2 }, "float64")
  exchange.send(node, v, st.sent[v], w, exchange.COUNT)
  w:free()
  st.w = st.w / 2   -- z stays: (w z / 2) / (w / 2)
end

-- The next push from v if it is there within timeout (0: only if it came): x, w' | nil.
local function take(node, st, v, timeout)
  local k = (st.taken[v] or 0) + 1
  local x, enc, said = node.endpoint:recv(v, exchange.MODEL, k, timeout, node.chain.wire_dtype)
  if not x then
    -- a poll: nothing yet, or nothing more from a neighbour that has finished
    if timeout == 0 and (enc == "timeout" or (enc == "dead" and said == "")) then return nil end
    local what = string.format("async: the push %d from node %d did not come (%s%s)", k, v, enc,
                               said and said ~= "" and ": " .. said or "")
    if node.cfg.on_peer_failure == "abort" then error(what, 0) end
    node.log:write("%s; continuing without it (its mass is lost)", what)
    st.expected[v] = st.taken[v] or 0
    return nil
  end
  local y, err = node.chain:decode(x, node.model:numel())
  if not y then error(string.format("async: node %d's push %d: %s", v, k, tostring(err)), 0) end
  local w = node.endpoint:recv(v, exchange.COUNT, k, node.cfg.peer_timeout, "float64")
  if not w then error(string.format("async: node %d's push %d came without its weight", v, k), 0) end
  st.taken[v] = k
  local wv = w:item()
  w:free()
  return y, wv
end

local function absorb(node, st, got, ws)
  if #got == 0 then return end
  local total = st.w
  for _, w in ipairs(ws) do total = total + w end
  local weights = {}
  for i = 1, #got do weights[i] = 1 / total end
  node.model:mix(st.w / total, got, weights)   -- z = (w z + sum x) / (w + sum w')
  st.w = total
  for _, x in ipairs(got) do x:free() end
end

local function round(node, st, r)
  node:fire("pre_train", r)
  local loss, secs = exchange.train(node, node.local_steps)
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  local t0 = host.clock()
  send(node, st, r)
  node.endpoint:release()
  local got, ws = {}, {}
  local last = r == node.cfg.rounds
  for _, v in ipairs(node.graph.adj[node.uid]) do
    v = math.tointeger(v)
    local want = last and st.expected[v] or math.huge
    while (st.taken[v] or 0) < want do
      local x, w = take(node, st, v, last and node.cfg.peer_timeout or 0)
      if not x then break end
      got[#got + 1], ws[#ws + 1] = x, w
    end
  end
  node.endpoint:acquire(r + 1)
  node.metrics:add("models_received", r, #got)
  absorb(node, st, got, ws)
  node.push_weight = st.w
  node.metrics:add("push_weight", r, st.w)
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return loss, secs
end

M.spec = registry.register {
  kind = "algorithm", name = "async", graph = true,
  doc = "asynchronous gossip (push-sum / SGP): push half the mass to a random neighbour, absorb what came",
  check = function(_, cfg)
    if cfg.round_timeout then   -- and a round's end would drop the pushes of a link's earlier sequence numbers
      return "async: round_timeout does not apply (there are no global rounds to end)"
    end
    local sharing = registry.spec("sharing", cfg.sharing).name
    if sharing ~= "average" then
      return string.format("async: pushes the whole model (push-sum); sharing '%s' does not apply", sharing)
    end
    if cfg.checkpoint_every then
      return "async: checkpoint_every is not supported (a node's push-sum weight and its pushes in flight "
             .. "are not in a checkpoint)"
    end
  end,
  new = function(_, node)
    local cfg, g, u = node.cfg, node.graph, node.uid
    local st = { w = 1.0, sent = {}, taken = {}, expected = {} }
    for _, v in ipairs(g.adj[u]) do   -- how many pushes each neighbour sends this node in all
      v = math.tointeger(v)
      local n = 0
      for k = 1, cfg.rounds do
        if M.target(cfg, g, v, k) == u then n = n + 1 end
      end
      st.expected[v] = n
    end
    node.push_weight = st.w
    return function(n, r) return round(n, st, r) end
  end,
}

return M
