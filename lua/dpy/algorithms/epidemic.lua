--- Algorithm epidemic (Epidemic Learning, de Vos et al., NeurIPS 2023): each round a node trains,
-- sends its model to s peers of the round's random directed graph, and averages its own model with
-- the k models it received, 1/(k + 1) each (the paper's aggregation).
--   variant = "oracle" (EL-Oracle): the round graph is a random s-regular digraph: every node sends
--     to s and receives from s.
--   variant = "local" (EL-Local): every node draws its s peers uniformly by itself, from its own
--     stream; it receives from however many drew it (0 .. n - 1).
-- Both graphs are derived from the run seed and the round by every node alone (no message). So a
-- receiver knows who sends to it, and a round ends when those models are in: nobody waits for a
-- model that is not coming (DecentralizePy's EL-Local has each node tell the others it does not
-- send instead). A peer that failed is left out; its weight goes to the models that came.
local registry = require "dpy.registry"
local graph = require "dpy.graph"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"
local churn = require "dpy.churn"

local M = {}

--- epidemic.round_graph(cfg, variant, s, r) -> round r's directed graph ({ n, out, from }), the
-- same on every node: from cfg.seed, cfg.nodes and r alone.
function M.round_graph(cfg, variant, s, r)
  local seed = cfg.seed * 1000003 + r
  if variant == "oracle" then return graph.regular_directed(cfg.nodes, s, seed) end
  return graph.random_out(cfg.nodes, s, seed)
end

local function live(node, list)
  if not node.dropped then return list end
  local out = {}
  for _, v in ipairs(list) do
    if not node.dropped[v] then out[#out + 1] = v end
  end
  return out
end

local function round(o, node, r)
  if exchange.absent(node, r) then return nil, 0 end   -- churn: out this round
  node:fire("pre_train", r)
  local loss, secs = exchange.train(node, node.local_steps)
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  local t0 = host.clock()
  local g = M.round_graph(node.cfg, o.variant, o.s, r)
  local cfg = node.cfg   -- churn: no model to or from a node absent this round
  local to = churn.present(cfg, live(node, g.out[node.uid]), r)
  local from = churn.present(cfg, live(node, g.from[node.uid]), r)
  local flat = exchange.model_flat(node)
  if #to > 0 then exchange.send_model(node, to, r, flat) end
  flat:free()   -- before the wait: at the barrier a node holds only the bytes it sent
  node.endpoint:release()
  local got = {}
  local deadline = exchange.deadline(node, true)   -- the senders are waited for together
  for _, v in ipairs(from) do
    got[#got + 1] = exchange.receive(node, v, r, deadline, true)   -- nil (not appended): dropped or late
  end
  node.endpoint:acquire(r + 1)   -- as dpsgd: the combine opens the node's next round of compute
  local w, weights = 1 / (#got + 1), {}
  for i = 1, #got do weights[i] = w end
  node.metrics:add("models_received", r, #got)
  exchange.combine(node, r, got, weights, w)
  for _, x in ipairs(got) do x:free() end
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return loss, secs
end

M.spec = registry.register {
  kind = "algorithm", name = "epidemic", sharing = true, simulated = true, churn = true, deadlines = true,
  doc = "Epidemic Learning: send the model to s peers of a fresh random directed graph each round "
        .. "(EL-Oracle: s-regular; EL-Local: each node's own draw), average what came, 1/(k + 1) each",
  options = {
    variant = { one_of = { "oracle", "local" }, default = "oracle",
                doc = "oracle: an s-regular digraph per round; local: each node draws its s peers" },
    s = { type = "integer", min = 1, default = 7, doc = "peers each node sends to per round" },
  },
  -- what the options need of the run, checked by the launcher before any node starts
  check = function(o, cfg)
    if registry.spec("sharing", cfg.sharing).name == "secure_average" then
      return "epidemic: sharing 'secure_average' exchanges messages of its own; Epidemic Learning combines "
             .. "with a rule of received models (average, an aggregator)"
    end
    if o.s >= cfg.nodes then
      return string.format("epidemic: s = %d needs more than %d nodes (s peers other than the node)", o.s, cfg.nodes)
    end
  end,
  new = function(o, node)
    if node.sharing.exchange then
      error("epidemic: the sharing rule exchanges messages of its own; Epidemic Learning combines "
            .. "with a rule of received models (average, an aggregator)", 0)
    end
    local bad = M.spec.check(o, node.cfg)
    if bad then error(bad, 0) end
    return function(n, r) return round(o, n, r) end
  end,
}

return M
