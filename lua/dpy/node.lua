--- dpy.node: one node of a decentralized run, in its own Lua state on its own thread.
-- main(endpoint, args) builds the node's components from the config (the container: data
-- partition, model, optimizer, trainer, graph, metrics, log, actions) and runs the rounds:
--   pre_train -> local steps -> post_train -> pre_exchange -> send / receive / aggregate ->
--   post_exchange [-> evaluation]
-- Algorithms: dpsgd (Metropolis-Hastings averaging with the graph's neighbours), fedavg (node 0
-- is the server; a seeded fraction of clients trains each round), ps (node 0 is a parameter
-- server applying the mean of the workers' gradients).
local tensor = require "dpy.tensor"
local registry = require "dpy.registry"
local config = require "dpy.config"
local data = require "dpy.data"
local trainer = require "dpy.trainer"
local metrics = require "dpy.metrics"
local log = require "dpy.log"
local layout = require "dpy.layout"
local graph = require "dpy.graph"
local random = require "dpy.random"
local host = require "dpy.host.core"
local actions = require "dpy.actions"
local transforms = require "dpy.transforms"
require "dpy.sharing"

local M = {}

local MODEL = 0   -- channel of model (and gradient) vectors
local COUNT = 1   -- fedavg: a client's sample count, beside its model

local function split_lines(s)
  local out = {}
  for line in (s or ""):gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

-- {==== the container ====}

--- Builds the node's components; returns the node table that actions see.
function M.build(ep, args)
  local uid = ep:uid()
  local cfg = config.load(args.config, split_lines(args.overrides))
  if args.seed then cfg.seed = math.tointeger(tonumber(args.seed)) end
  local dir = args.dir
  local node = { uid = uid, cfg = cfg, dir = dir, endpoint = ep, round = 0, t0 = tonumber(args.t0) }
  node.log = assert(log.open(string.format("%s/%d.log", dir, uid), uid))
  node.metrics = metrics.new(uid, string.format("%s/%d.metrics.json", dir, uid))
  -- the same initial model on every node; data order and dropout from the node's own stream
  tensor.manual_seed(cfg.seed)
  node.train_set = registry.build("dataset", cfg.dataset, { train = true })
  node.test_set = registry.build("dataset", cfg.dataset, { train = false })
  local shape_of = node.train_set
  if cfg.task == "binary" then
    node.task = trainer.binary(cfg.positive_classes, node.train_set.classes)
    shape_of = setmetatable({ classes = 1 }, { __index = node.train_set })
  end
  node.model = registry.build("model", cfg.model, { dataset = shape_of })
  tensor.manual_seed(cfg.seed * 1000003 + uid + 1)
  node.is_server = layout.has_server(cfg) and uid == 0
  local parts_n = layout.has_server(cfg) and cfg.nodes - 1 or cfg.nodes
  if not node.is_server then
    node.indices = layout.load_part(dir, layout.has_server(cfg) and uid or uid + 1, parts_n)
    node.loader = data.loader(node.train_set, { batch_size = cfg.batch_size, indices = node.indices })
  end
  node.optimizer = registry.build("optimizer", cfg.optimizer, { model = node.model })
  if node.loader then
    node.trainer = trainer.new { model = node.model, optimizer = node.optimizer,
                                 loader = node.loader, loss = cfg.loss, task = node.task }
    node.local_steps = cfg.local_epochs and cfg.local_epochs * #node.loader or cfg.local_steps
  end
  if cfg.algorithm == "dpsgd" then
    node.graph = layout.load_graph(dir)
    node.sharing = registry.build("sharing", cfg.sharing)
  end
  node.chain = transforms.chain(cfg.transforms)
  if cfg.test_samples then node.test_indices = tensor.arange(math.min(cfg.test_samples, data.size(node.test_set))) end
  node.evaluates = M.evaluates(cfg, uid)
  node.outgoing = {}          -- functions(flat, node, round) -> flat applied before sending
  node.handlers = actions.load(cfg.actions, node)
  return setmetatable(node, M.Node)
end

--- What a node table offers interactively (dpy-lua repl CONFIG --uid U).
M.Node = { __index = {} }
local Node = M.Node.__index

--- node:train([steps = local_steps]) -> mean loss
function Node:train(steps)
  if not self.trainer then error("node " .. self.uid .. " is a server: it does not train", 2) end
  return self.trainer:run(steps or self.cfg.local_steps)
end

--- node:evaluate() -> test loss, test accuracy
function Node:evaluate()
  return trainer.evaluate(self.model, self.test_set, { batch_size = self.cfg.eval_batch_size,
                                                       indices = self.test_indices, loss = self.cfg.loss,
                                                       task = self.task })
end

--- node:neighbours() -> the uids this node exchanges with (dpsgd)
function Node:neighbours()
  return self.graph and self.graph.adj[self.uid] or {}
end

--- Whether uid evaluates: every node, or a seeded sample of eval_nodes (the server always).
function M.evaluates(cfg, uid)
  if layout.has_server(cfg) then return uid == 0 end
  if not cfg.eval_nodes or cfg.eval_nodes >= cfg.nodes then return true end
  local all = {}
  for u = 0, cfg.nodes - 1 do all[u + 1] = u end
  random.new(cfg.seed):shuffle(all)
  for i = 1, cfg.eval_nodes do if all[i] == uid then return true end end
  return false
end

local function fire(node, event, ...)
  for _, h in ipairs(node.handlers[event] or {}) do h(node, ...) end
end

-- {==== exchange helpers ====}

-- Decodes a received payload; nil and a log line when it was encoded by another chain or is
-- malformed (the message is dropped; the peer stays).
local function decode(node, peer, r, x, encoding)
  local chain = node.chain
  local why
  if encoding ~= chain.id then
    why = string.format("encoded by transform chain %08x, but this node decodes %08x (%s)",
                        encoding, chain.id, chain.id == 0 and "no transforms" or chain.label)
  else
    local v, err = chain:decode(x)
    if v then return v end
    why = "malformed: " .. err
  end
  if x then x:free() end
  node.log:write("round %d: rejected node %d's payload: %s", r, peer, why)
  node.rejected_payloads = (node.rejected_payloads or 0) + 1
  return nil
end

-- Receives from peer for round r and decodes it, or handles its failure per on_peer_failure:
-- returns the float32 vector, or nil when the peer is dropped ("continue") or its payload
-- rejected.
local function receive(node, peer, r)
  local cfg = node.cfg
  local x, why = node.endpoint:recv(peer, MODEL, r, cfg.peer_timeout, node.chain.wire_dtype)
  if x then return decode(node, peer, r, x, why) end
  local what = why == "dead" and "is gone" or string.format("sent nothing for %g s", cfg.peer_timeout)
  if cfg.on_peer_failure == "abort" then
    error(string.format("round %d: peer %d %s; stopping (on_peer_failure = \"abort\")", r, peer, what), 0)
  end
  node.log:write("round %d: peer %d %s; continuing without it", r, peer, what)
  node.dropped = node.dropped or {}
  node.dropped[peer] = true
  return nil
end

-- Sends t to peer (a uid or a list of uids: they share one copy of the bytes).
local function send(node, peer, r, t, channel)
  local ok, err = node.endpoint:send(peer, channel or MODEL, r, t, channel and 0 or node.chain.id)
  if not ok then
    if node.cfg.on_peer_failure == "abort" then error(string.format("round %d: %s", r, err), 0) end
    node.log:write("round %d: send failed (%s); continuing", r, err)
  end
end

-- What a node sends of flat: node.outgoing's functions, then the transform chain. Each step's
-- bytes in and out go to the metrics (once per round).
local function encode(node, flat, r)
  local t = flat
  for _, f in ipairs(node.outgoing) do
    local u = f(t, node, r)
    if t ~= flat and u ~= t then t:free() end
    t = u
  end
  local sizes = node.encoded_round ~= r and {} or nil
  local payload = node.chain:encode(t, sizes)
  if payload ~= t and t ~= flat then t:free() end
  for i, size in ipairs(sizes or {}) do
    node.metrics:add(node.chain:metric(i, "in"), r, size[1])
    node.metrics:add(node.chain:metric(i, "out"), r, size[2])
  end
  node.encoded_round = r
  return payload
end

-- Sends flat's encoding to peer, then frees what encoding made.
local function send_encoded(node, peer, r, flat)
  local payload = encode(node, flat, r)
  send(node, peer, r, payload)
  if payload ~= flat then payload:free() end
end

local function neighbours(node, r)
  local g = node.graph
  if g.dynamic then
    g = registry.build("graph", node.cfg.graph, { nodes = node.cfg.nodes, seed = node.cfg.seed, round = r })
  end
  local live = {}
  for _, v in ipairs(g.adj[node.uid]) do
    if not (node.dropped and node.dropped[v]) then live[#live + 1] = v end
  end
  return g, live
end

-- Trains in a compute slot (acquired unless already held) and keeps it: the caller releases it
-- once its compute is done.
local function train(node, steps)
  node.endpoint:acquire(node.round)
  local t0 = host.clock()
  local loss = node.trainer:run(steps)
  return loss, host.clock() - t0
end

-- {==== algorithms: each runs round r and returns train loss, train seconds ====}

local ALGORITHMS = {}

--- D-PSGD: train, send the model to every neighbour, average with Metropolis-Hastings weights.
function ALGORITHMS.dpsgd(node, r)
  fire(node, "pre_train", r)
  local loss, secs = train(node, node.local_steps)
  fire(node, "post_train", r)
  fire(node, "pre_exchange", r)
  local t0 = host.clock()
  local g, peers = neighbours(node, r)
  local flat = node.model:get_flat()
  if #peers > 0 then send_encoded(node, peers, r, flat) end
  flat:free()   -- before the wait: at the barrier a node holds only the bytes it sent
  node.endpoint:release()
  local w = graph.metropolis_hastings(g, node.uid)
  local got, weights, kept = {}, {}, 0
  for _, v in ipairs(peers) do
    local x = receive(node, v, r)
    if x then
      got[#got + 1], weights[#weights + 1] = x, w[v]
    else
      kept = kept + w[v]   -- a dropped peer's weight stays with this node
    end
  end
  -- the combine opens the node's next round of compute: it keeps the slot through the next
  -- training and sending, so that a node computes only while it holds a slot
  node.endpoint:acquire(r + 1)
  node.sharing.combine(node, r, got, weights, w[node.uid] + kept)
  for _, x in ipairs(got) do x:free() end
  node.exchange_seconds = host.clock() - t0
  fire(node, "post_exchange", r)
  return loss, secs
end

-- The clients sampled in round r (fedavg), the same on every node.
local function sampled(cfg, r)
  local clients = {}
  for u = 1, cfg.nodes - 1 do clients[#clients + 1] = u end
  local k = math.max(1, math.floor(cfg.fraction * #clients + 0.5))
  random.new(cfg.seed * 7919 + r):shuffle(clients)
  local chosen = {}
  for i = 1, k do chosen[i] = clients[i] end
  table.sort(chosen)
  return chosen
end

--- FedAvg: the server sends the global model to the sampled clients, they train local_steps and
-- send it back; the server averages them weighted by their sample counts.
function ALGORITHMS.fedavg(node, r)
  local cfg = node.cfg
  local chosen = sampled(cfg, r)
  local t0 = host.clock()
  if node.is_server then
    fire(node, "pre_exchange", r)
    local flat = node.model:get_flat()
    send_encoded(node, chosen, r, flat)
    local sum, total = flat:mul(0), 0
    for _, c in ipairs(chosen) do
      local x = receive(node, c, r)
      local size = x and node.endpoint:recv(c, COUNT, r, cfg.peer_timeout, "float64")
      if x and size then
        sum:add_(x, size:item())
        total = total + size:item()
      end
      if x then x:free() end
    end
    if total > 0 then node.model:set_flat(sum / total) end
    node.exchange_seconds = host.clock() - t0
    fire(node, "post_exchange", r)
    return nil, 0
  end
  local mine = false
  for _, c in ipairs(chosen) do mine = mine or c == node.uid end
  if not mine then return nil, 0 end
  local global = receive(node, 0, r)
  if not global then return nil, 0 end
  node.model:set_flat(global)
  fire(node, "pre_train", r)
  local loss, secs = train(node, node.local_steps)
  node.endpoint:release()
  fire(node, "post_train", r)
  fire(node, "pre_exchange", r)
  local flat = node.model:get_flat()
  send_encoded(node, 0, r, flat)
  flat:free()
  send(node, 0, r, tensor.new({ node.indices:numel() + 0.0 }, "float64"), COUNT)
  node.exchange_seconds = host.clock() - t0 - secs
  fire(node, "post_exchange", r)
  return loss, secs
end

--- Parameter server: workers pull the model, compute the gradient of local_steps batches (summed)
-- and push it; the server applies the mean gradient with its optimizer.
function ALGORITHMS.ps(node, r)
  local cfg = node.cfg
  local t0 = host.clock()
  if node.is_server then
    fire(node, "pre_exchange", r)
    local flat = node.model:get_flat()
    local workers = {}
    for u = 1, cfg.nodes - 1 do
      if not (node.dropped and node.dropped[u]) then workers[#workers + 1] = u end
    end
    send_encoded(node, workers, r, flat)
    local sum, n = flat:mul(0), 0
    for u = 1, cfg.nodes - 1 do
      if not (node.dropped and node.dropped[u]) then
        local g = receive(node, u, r)
        if g then
          sum:add_(g)
          g:free()
          n = n + 1
        end
      end
    end
    if n > 0 then
      -- the mean gradient into .grad of each parameter, then one optimizer step
      node.optimizer:zero_grad()
      local params, off, mean = node.model:parameters(), 0, sum / n
      for _, p in ipairs(params) do
        local k = p:numel()
        local gp = mean:narrow(0, off, k):view(p:size())
        local loss = (p * gp):sum()   -- d loss / d p = gp
        loss:backward()
        off = off + k
      end
      node.optimizer:step()
    end
    node.exchange_seconds = host.clock() - t0
    fire(node, "post_exchange", r)
    return nil, 0
  end
  local model = receive(node, 0, r)
  if not model then return nil, 0 end
  node.model:set_flat(model)
  fire(node, "pre_train", r)
  node.endpoint:acquire(r)
  local t1 = host.clock()
  node.optimizer:zero_grad()
  local sum = 0
  local loss_fn = require("dpy.nn")[cfg.loss]
  for _ = 1, cfg.local_steps do
    local x, y = node.loader:next()
    local out = node.model(x)
    local l = loss_fn(out, y)
    l:backward()
    sum = sum + l:item()
    x:free(); y:free(); out:free(); l:free()
  end
  local grad = node.model:grad_flat() / cfg.local_steps
  local secs = host.clock() - t1
  node.endpoint:release()
  fire(node, "post_train", r)
  fire(node, "pre_exchange", r)
  send_encoded(node, 0, r, grad)
  grad:free()
  node.exchange_seconds = host.clock() - t0 - secs
  fire(node, "post_exchange", r)
  return sum / cfg.local_steps, secs
end

-- {==== the round loop ====}

local function evaluate(node, r)
  node.endpoint:acquire(r)
  local loss, acc = trainer.evaluate(node.model, node.test_set, {
    batch_size = node.cfg.eval_batch_size, indices = node.test_indices, loss = node.cfg.loss,
    task = node.task })
  node.endpoint:release()
  node.metrics:add("test_loss", r, loss)
  node.metrics:add("test_accuracy", r, acc)
  node.log:write("round %d: test loss %.4f, test accuracy %.4f", r, loss, acc)
  return acc
end

local function record(node, r, loss, train_secs, round_start, before)
  local m, t = node.metrics, node.endpoint:traffic()
  if loss then m:add("train_loss", r, loss) end
  m:add("bytes_sent", r, t.sent_payload + t.sent_header - before.sent)
  m:add("bytes_received", r, t.recv_payload + t.recv_header - before.recv)
  m:add("train_seconds", r, train_secs)
  m:add("exchange_seconds", r, node.exchange_seconds or 0)
  m:add("wall_seconds", r, host.clock() - round_start)
  before.sent, before.recv = t.sent_payload + t.sent_header, t.recv_payload + t.recv_header
  local rejected, why = node.endpoint:rejected()
  if rejected > (before.rejected or 0) then
    node.log:write("round %d: %d packet(s) rejected by this process so far (last: %s)", r, rejected, why)
    before.rejected = rejected
  end
end

local function run(node)
  local cfg = node.cfg
  local algorithm = ALGORITHMS[cfg.algorithm]
  local eval_every = cfg.eval_every or 10
  node.log:write("%s: %s, %d nodes, %s, %d rounds of %d local steps%s", cfg.name, cfg.algorithm,
                 cfg.nodes, node.is_server and "server" or
                 string.format("%d training samples", node.indices:numel()), cfg.rounds,
                 node.local_steps or 0,
                 node.graph and string.format(", %d neighbours", #node.graph.adj[node.uid]) or "")
  if node.t0 then node.metrics:add("ready_seconds", 0, host.clock() - node.t0) end
  fire(node, "startup")
  local before, last_save = { sent = 0, recv = 0 }, host.clock()
  for r = 1, cfg.rounds do
    node.round = r
    local t0 = host.clock()
    local loss, secs = algorithm(node, r)
    record(node, r, loss, secs, t0, before)
    local acc
    if node.evaluates and (r % eval_every == 0 or r == cfg.rounds) then acc = evaluate(node, r) end
    node.endpoint:report(r, acc)
    if acc or host.clock() - last_save > 5 then
      node.endpoint:release()   -- no compute slot held over a file write
      local ok, err = node.metrics:save()
      if not ok then error("cannot write metrics: " .. err, 0) end
      last_save = host.clock()
    end
  end
  fire(node, "shutdown")
  local ok, err = node.metrics:save()
  if not ok then error("cannot write metrics: " .. err, 0) end
  node.log:write("done: %d rounds", cfg.rounds)
end

--- The entry point of a node thread (see l_nodes.c): args = { config, dir, seed, overrides }.
function M.main(ep, args)
  local node = M.build(ep, args)
  fire(node, "init")
  registry.freeze()
  local ok, err = xpcall(run, debug.traceback, node)
  if not ok then
    node.metrics:save()   -- what was finished stays readable
    node.log:write("failed: %s", err)
    node.log:close()
    error(err, 0)
  end
  node.log:close()
end

return M
