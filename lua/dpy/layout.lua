--- dpy.layout: what the launcher and every process of a decentralized run derive from the config:
-- which process hosts which node, the tcp addresses, and the graph and partition files written
-- once into the run directory (graph.json, partition.pt; dpy.layout_files) that every node reads.
local tensor = require "dpy.tensor"
local registry = require "dpy.registry"
local graph = require "dpy.graph"
local metrics = require "dpy.metrics"
local host = require "dpy.host.core"
local files = require "dpy.layout_files"
local container = require "dpy.container"
local simclock = require "dpy.simclock"
local churn = require "dpy.churn"
local config = require "dpy.config"
local data = require "dpy.data"

local M = {}

--- The process hosting uid: contiguous blocks of uids per process.
function M.process_of(uid, nodes, processes)
  return uid * processes // nodes
end

--- The uids process p hosts.
function M.uids_of(p, nodes, processes)
  local uids = {}
  for u = 0, nodes - 1 do
    if M.process_of(u, nodes, processes) == p then uids[#uids + 1] = u end
  end
  return uids
end

--- uid -> process for every node, as a Lua list (entry uid + 1).
function M.node_process(nodes, processes)
  local map = {}
  for u = 0, nodes - 1 do map[u + 1] = M.process_of(u, nodes, processes) end
  return map
end

--- "host:port" per process.
--- layout.base_port(cfg, run_id) -> the port of process 0 (process p listens on it + p): the
-- config's `port`, else one drawn from the run id in 10000-31999, below the range Linux hands
-- out to outgoing connections (32768 and up), where a connection of this or another program
-- could hold it (runs started together collided there).
function M.base_port(cfg, run_id)
  return cfg.port or (10000 + run_id % (22000 - (cfg.processes or 1)))
end

--- layout.hold_ports(cfg, run_id) -> base, fds: the ports of a run whose processes all run on this
-- machine, each one already listening here (fds[p + 1]: process p's, for host.spawn to hand over,
-- then host.close): cfg.port, else the first of up to 64 picks from the run id (hops of a prime)
-- where every process's port can listen (another run may hold a pick). Held from the choice on, so
-- no other run takes one before its process starts: two runs started together drew neighbouring
-- picks from their run ids, both found them free, and one of their processes failed to listen.
-- Raises, naming the address, when it cannot listen there for another reason than a port in use,
-- or when no pick is free.
function M.hold_ports(cfg, run_id)
  local why, in_use
  for k = 0, cfg.port and 0 or 63 do
    local base, fds = M.base_port(cfg, run_id + k * 7919), {}
    for p = 0, cfg.processes - 1 do
      local fd, err = host.listen(cfg.host, base + p)
      if not fd then
        why, in_use = string.format("%s:%d: %s", cfg.host, base + p, err), err:find("in use", 1, true)
        break
      end
      fds[p + 1] = fd
    end
    if #fds == cfg.processes then return base, fds end
    for _, fd in ipairs(fds) do host.close(fd) end
    if not in_use then break end   -- another pick would not help
  end
  if cfg.port or not in_use then error((cfg.port and "port" or "host") .. ": cannot listen on " .. why, 0) end
  error("no free ports for the processes (64 picks from the run id), the last: " .. why, 0)
end

function M.addresses(cfg, run_id)
  local base = M.base_port(cfg, run_id)
  local list = {}
  for p = 0, cfg.processes - 1 do list[p + 1] = string.format("%s:%d", cfg.host, base + p) end
  return list
end

--- The "host:port" per process that dispatch wrote into dir (nil when there is none).
function M.read_addresses(dir)
  return (metrics.read(dir .. "/addresses.json"))
end

--- The spec of the config's algorithm (its `server` and `graph` say what the run needs).
function M.algorithm(cfg) return registry.spec("algorithm", cfg.algorithm, 2) end

--- layout.graph_context(cfg, round) -> the ctx a graph component is built with: { nodes, seed,
-- round, directed = true } when the run's rule takes a directed graph (a node's list: the nodes it
-- sends to), else { ..., undirected = who cannot use a one-way link, and why }. An algorithm takes
-- one when its spec says directed = true; dpsgd (directed = "sharing") when its sharing rule,
-- which then runs the round's exchange itself (exchange = true), says directed = true.
function M.graph_context(cfg, round)
  local ctx = { nodes = cfg.nodes, seed = cfg.seed, round = round }
  local alg = M.algorithm(cfg)
  local rule = alg.directed == "sharing" and registry.spec("sharing", cfg.sharing)
  if alg.directed == true or (rule and rule.directed and rule.exchange) then
    ctx.directed = true
  elseif rule and not rule.exchange then
    ctx.undirected = string.format("sharing '%s' cannot use: its Metropolis-Hastings average needs every link "
                                   .. "both ways (a rule with an exchange of its own that says directed = true in "
                                   .. "its spec takes a directed graph)", rule.name)
  elseif rule then
    ctx.undirected = string.format("sharing '%s' cannot use: its spec does not say directed = true", rule.name)
  else
    ctx.undirected = string.format("algorithm '%s' cannot use: its spec does not say directed = true", alg.name)
  end
  return ctx
end


local function limit(t, n)
  if not n or not t then return t end
  return t:narrow(0, 0, math.min(n, t:size(0)))
end

-- A component's error as a config error: no Lua location, and named by its key unless it is.
local function config_error(key, err, at)
  local msg = tostring(err):gsub("^[^:\n]*%.lua:%d+: ", "")
  if msg:sub(1, #key) ~= key then msg = key .. ": " .. msg end
  error((at and at .. ": " or "") .. msg, 0)
end

-- What the run's algorithm or sharing rule would not follow, without a word: churn, a simulated
-- clock, round deadlines, client sampling, a transform chain (a message, or nil). A sharing rule
-- with messages of its own (secure_average) follows none of them.
local function not_followed(cfg, alg)
  local own = registry.spec("sharing", cfg.sharing)
  own = own.exchange and own.name
  local who = alg.name .. (own and " with sharing " .. own or "")
  if cfg.churn and not (alg.churn and not own) then
    return string.format("churn: works with dpsgd and epidemic (with a sharing rule of received models), not %s",
                         who)
  end
  if cfg.sim_clock and not (alg.simulated and not own) then
    return string.format("sim_clock: simulates dpsgd and epidemic (with a sharing rule of received models), not %s",
                         who)
  end
  if cfg.round_timeout and not (alg.deadlines and not own) then
    return string.format("round_timeout: the deadline of a round's wait in dpsgd and epidemic (with a sharing rule "
                         .. "of received models; a user's algorithm that waits by exchange.deadline(node, true) "
                         .. "says deadlines = true); %s waits by peer_timeout", who)
  end
  if cfg.fraction and cfg.fraction ~= 1 and not alg.samples then   -- 1: everyone, what any algorithm does
    return string.format("fraction: the share of clients an algorithm with a server samples each round (fedavg, "
                         .. "secure_fedavg); %s samples none", alg.name)
  end
  if cfg.eval_nodes and alg.server then
    return string.format("eval_nodes: the sample of the nodes that evaluate their own models (dpsgd); %s's server "
                         .. "evaluates the one model", alg.name)
  end
  if next(cfg.transforms or {}) and (alg.secure or own) then
    return string.format("transforms: secure aggregation sends the model as masked fixed-point sums "
                         .. "(fraction_bits), which no transform chain encodes; %s would apply it to %s", who,
                         own and "none of its messages" or "the server's broadcast alone")
  end
end

-- "1×28×28 images" or "20 values": one sample of the batch x, as the model takes it.
local function samples_text(x)
  local dims = x:size()
  table.remove(dims, 1)
  if #dims == 1 then return dims[1] .. " values" end
  return table.concat(dims, "×") .. " images"
end

-- What is wrong with the outputs `out` of a batch of n for the config's task (nil: nothing): fewer
-- than one a class (a binary task: other than 1).
local function outputs_misfit(cfg, out, n, classes)
  local dims = out:size()
  local width = #dims == 2 and dims[1] == n and dims[2] or nil
  if cfg.task == "binary" then   -- one logit a sample: [n, 1] or [n]
    if width == 1 or (#dims == 1 and dims[1] == n) then return nil end
    if width then return string.format("it gives %d outputs, a binary task takes 1", width) end
    return string.format("its outputs for a batch of %d have shape [%s], not [%d, 1]", n, table.concat(dims, ", "), n)
  end
  if width and width >= classes then return nil end   -- logits past the classes train as any other
  if width then
    return string.format("it gives %d output%s, the dataset has %d classes", width, width == 1 and "" or "s", classes)
  end
  return string.format("its outputs for a batch of %d have shape [%s], not [%d, %d]", n, table.concat(dims, ", "), n,
                       classes)
end

-- Builds the model for train and passes its first samples (2 at most) through it, in eval mode
-- without autograd; returns what does not fit (nil: it fits) and the samples' description.
local function try_model(cfg, train)
  local n = math.min(2, train.images:size(0))
  local first <close> = tensor.arange(n)
  local x, y = data.loader(train, { batch_size = n, indices = first, shuffle = false }):next()
  y:free()
  local what = samples_text(x)
  local ok, model = pcall(container.model, cfg, train)
  if not ok then
    x:free()
    return tostring(model), what, true
  end
  model:eval()
  local out
  ok, out = pcall(tensor.no_grad, model, x)
  x:free()
  local bad = not ok and tostring(out) or outputs_misfit(cfg, out, n, train.classes)
  if ok then out:free() end
  model:free()
  return bad, what
end

--- layout.check_model(cfg, train): raises when the config's model cannot be built for the training
-- set train, cannot take its samples, or gives fewer outputs than classes (a binary task: not 1),
-- naming the model, the dataset and why. Nodes found it only as they trained, with torch's words
-- alone. A batch of 2 takes milliseconds; the default generator's state is put back, so the run
-- draws its initial weights as it would without the check.
function M.check_model(cfg, train)
  if cfg.task == "binary" then   -- a class the data lacks failed every node as it started
    local ok, err = pcall(require("dpy.trainer").binary, cfg.positive_classes, train.classes)
    if not ok then error("positive_classes: " .. tostring(err):gsub("^[^:\n]*%.lua:%d+: ", ""), 0) end
    local seen, n = {}, 0
    for _, c in ipairs(cfg.positive_classes) do
      if not seen[c] then seen[c], n = true, n + 1 end
    end
    if n >= train.classes then   -- one label for every sample: nothing to learn
      error(string.format("positive_classes: every class of %s (0..%d) is positive: no sample would be negative",
                          train.name or registry.spec("dataset", cfg.dataset).name, train.classes - 1), 0)
    end
  end
  local gen = tensor.default_generator()
  local state <close> = gen:state()
  local ok, bad, what, unbuilt = pcall(try_model, cfg, train)
  gen:set_state(state)
  if ok and not bad then return end
  if not ok then bad, what = tostring(bad), "its samples" end
  local spec = registry.spec("model", cfg.model)
  local name = spec.name
  if bad:sub(1, #name + 8) == "model '" .. name .. "'" then error(bad, 0) end   -- the registry's own words on it
  if unbuilt and spec.path then   -- a user's model whose new failed: its own error, where it is
    error(string.format("model '%s' (%s): new failed: %s", name, spec.path, bad), 0)
  end
  bad = bad:gsub("^[^:\n]*%.lua:%d+: ", "")
  local at = config.where(cfg, "model")   -- where the model was set, and a user's model's file
  error(string.format("%smodel '%s'%s does not fit dataset '%s' (%s): %s", at and at .. ": " or "", name,
                      spec.path and " (" .. spec.path .. ")" or "",
                      train.name or registry.spec("dataset", cfg.dataset).name, what, bad), 0)
end

-- "1×8×8": one sample's dimensions of a dataset's images.
local function sample_dims(images)
  local dims = images:size()
  table.remove(dims, 1)
  return table.concat(dims, "×")
end

--- layout.check_splits(cfg, train, test): raises when the test set's classes or one sample's shape
-- differ from the training set's (the model is built for the training set's), naming the dataset:
-- nodes met the one as a wrong accuracy and the other as torch's shape error at their first evaluation.
function M.check_splits(cfg, train, test)
  local spec = registry.spec("dataset", cfg.dataset)
  local name = string.format("dataset '%s'%s", spec.name, spec.path and " (" .. spec.path .. ")" or "")
  if test.classes ~= train.classes then
    error(string.format("%s: the test set has %s classes, the training set %s", name, tostring(test.classes),
                        tostring(train.classes)), 0)
  end
  local a, b = sample_dims(test.images), sample_dims(train.images)
  if a ~= b then error(string.format("%s: the test set's samples are %s, the training set's %s", name, a, b), 0) end
end

--- layout.check(cfg) -> what prepare writes, { graph, dynamic, parts }: raises, with the key at
-- fault ("stragglers: ..."), on whatever the config alone makes wrong for a decentralized run:
-- more processes than nodes, an algorithm's options that do not fit the run, a stragglers or churn
-- table that does not fit the nodes, a graph that cannot be built or is not connected, a dataset
-- that cannot be read, a model that does not fit it (M.check_model), a test set that cannot be read
-- or does not match the training set (M.check_splits), a partition that cannot be made. It builds the
-- graph, both splits (mapped or shared files: milliseconds) and the partition (from the dataset's
-- labels) to know; experiment.check runs it before anything is written and keeps its result for prepare.
-- A refusal that names its key ("eval_nodes: ...", "actions[1]: ...") is named where the key was set.
local check
function M.check(cfg)
  local ok, checked = pcall(check, cfg)
  if ok then return checked end
  local key = type(checked) == "string" and checked:match("^([%a_][%w_]*)[:%[]")
  local at = key and config.SCHEMA[key] and config.where(cfg, key)
  error(at and at .. ": " .. checked or checked, 0)
end

function check(cfg)
  if cfg.eval_nodes and cfg.eval_nodes > cfg.nodes and not config.is_effective(cfg) then   -- it evaluated them all
    error(string.format("eval_nodes: %d nodes to evaluate, the run has %d", cfg.eval_nodes, cfg.nodes), 0)
  end
  if cfg.processes and cfg.processes > cfg.nodes then
    error(string.format("processes: %d processes for %d nodes (a process hosts one node or more)", cfg.processes,
                        cfg.nodes), 0)
  end
  local alg, alg_options = registry.options("algorithm", cfg.algorithm)
  if alg.check then   -- what an algorithm's options need of the run (epidemic: s below nodes)
    local bad = alg.check(alg_options, cfg)
    if bad then error(bad, 0) end
  end
  local fits, why = pcall(simclock.factors, cfg)   -- a bad stragglers table, before any node starts
  if not fits then   -- named where it was set, as the config's own checks of slowdown and factors are
    local at = config.where(cfg, "stragglers")
    error((at and at .. ": " or "") .. tostring(why), 0)
  end
  churn.schedule(cfg)   -- raises on a uid that is not a node
  if cfg.reset_optimizer and alg.name == "ps" then   -- ps's workers send gradients: no state of theirs to drop
    error("reset_optimizer: drops a node's optimizer state before its round's training, not ps's (its "
          .. "server steps the one optimizer)", 0)
  end
  -- a run directory of before these checks reruns as it ran, what they refuse ignored as then
  local ignored = not config.is_effective(cfg) and not_followed(cfg, alg)
  if ignored then error(ignored, 0) end
  local checked = {}
  if alg.graph then
    local rule = registry.spec("sharing", cfg.sharing)
    if rule.directed and not rule.exchange then
      error(string.format("sharing '%s'%s: says directed = true without exchange = true: a rule that takes a "
                          .. "directed graph runs the round's messages itself (the built-in exchange averages "
                          .. "over links both ways)", rule.name, rule.path and " (" .. rule.path .. ")" or ""), 0)
    end
    local ctx = M.graph_context(cfg, 1)
    local ok, g = pcall(registry.build, "graph", cfg.graph, ctx)
    -- named where the graph was set, or, the default graph, the nodes (a regular graph of too few)
    if not ok then config_error("graph", g, config.where(cfg, "graph") or config.where(cfg, "nodes")) end
    checked.directed = ctx.directed and graph.one_way(g) ~= nil or nil
    local connected, cut = graph.connected(g)
    if not connected then   -- named with its file: a graph file's, or a user's graph component's
      local file = type(cfg.graph) == "table" and cfg.graph.path or registry.spec("graph", cfg.graph).path
      local how = ctx.directed and "node 0's messages cannot reach node %d along its arcs"
                  or "node %d cannot reach node 0"
      local at = config.where(cfg, "graph")
      error(string.format("%sgraph: the graph is not connected%s: " .. how, at and at .. ": " or "",
                          file and " (" .. file .. ")" or "", cut), 0)
    end
    checked.graph, checked.dynamic = g, registry.spec("graph", cfg.graph).dynamic
    -- a robust rule that cannot aggregate the models of the graph's least neighbourhood would stop
    -- every such node in round 1: a fixed graph's dpsgd round gives a node its own and its neighbours'
    local rule_opts
    rule, rule_opts = registry.options("sharing", cfg.sharing)
    if rule.fits and alg.name == "dpsgd" and not checked.dynamic and not checked.directed then
      local least, who = math.huge, 0
      for u = 0, g.n - 1 do
        local d = #(g.adj[u] or {})
        if d < least then least, who = d, u end
      end
      local bad = rule.fits(rule_opts, least + 1)
      if bad then
        local at = config.where(cfg, "sharing")
        error(string.format("%ssharing: %s: node %d has %d neighbour%s, so its rounds aggregate %d models: %s",
                            at and at .. ": " or "", rule.name, who, least, least == 1 and "" or "s", least + 1,
                            bad), 0)
      end
    end
  end
  local parts_n = container.has_server(cfg) and cfg.nodes - 1 or cfg.nodes
  if parts_n < 1 then error("nodes: " .. alg.name .. " needs at least 2 nodes (a server and a client)", 0) end
  local ok, train = pcall(registry.build, "dataset", cfg.dataset, { train = true })
  if not ok then config_error("dataset", train) end
  M.check_model(cfg, train)
  local test
  ok, test = pcall(registry.build, "dataset", cfg.dataset, { train = false })
  if not ok then config_error("dataset", test) end
  M.check_splits(cfg, train, test)
  for i, entry in ipairs(cfg.actions or {}) do   -- what an action needs of the run and its data (label_flipping's map)
    local spec, opts = registry.options("action", entry)
    local bad = spec.check and spec.check(opts, cfg, alg, train)
    if not bad and spec.manifest then   -- what it decides for the run (the nodes it picks) may not fit the run
      local made, err = pcall(spec.manifest, opts, cfg)
      bad = not made and tostring(err) or nil
    end
    if bad then error(string.format("actions[%d]: %s", i, bad), 0) end
  end
  -- groups: the dataset's natural partition (writers, hospitals), for the "natural" partitioner
  local parts
  ok, parts = pcall(registry.build, "partitioner", cfg.partition,
                    { labels = limit(train.labels, cfg.train_samples), nodes = parts_n, seed = cfg.seed,
                      groups = limit(train.groups, cfg.train_samples), dataset = train.name })
  if not ok then config_error("partition", parts, config.where(cfg, "partition")) end
  for k, part in ipairs(parts) do   -- a node without samples failed its loader as it started
    if part:numel() == 0 then
      local uid = container.has_server(cfg) and k or k - 1
      local at = config.where(cfg, "partition")
      error(string.format("%spartition: %s gives node %d no training samples (of %d): a node without data cannot "
                          .. "train", at and at .. ": " or "", registry.spec("partitioner", cfg.partition).name, uid,
                          limit(train.labels, cfg.train_samples):size(0)), 0)
    end
  end
  checked.parts = parts
  return checked
end

--- layout.write(dir, checked): writes what layout.check built into dir (graph.json, partition.pt);
-- returns { edges, spectral_gap } of the graph.
function M.write(dir, checked)
  local info = {}
  local g = checked.graph
  if g then
    files.write_graph(dir, g, checked.dynamic, checked.directed)
    -- a directed graph has no symmetric mixing matrix: no spectral gap to give
    info.edges = not checked.directed and graph.edges(g) or nil
    -- O(n^3): 0.1 s at 512 nodes, 0.5-1 at 1024
    info.spectral_gap = not checked.directed and g.n <= 512 and graph.spectral_gap(g) or nil
  end
  files.write_parts(dir, checked.parts)
  return info
end

--- layout.prepare(cfg, dir [, checked]) -> { edges, spectral_gap }: writes graph.json and
-- partition.pt into dir, from checked (what layout.check returned for cfg), else checking cfg first.
function M.prepare(cfg, dir, checked)
  return M.write(dir, checked or M.check(cfg))
end

return M
