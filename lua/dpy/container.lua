--- dpy.container: builds a node's components from the config (dependency injection) and locks
-- them after init. The components — data, model, optimizer, trainer, graph, sharing rule,
-- transform chain, algorithm, metrics, log, actions — fill named slots of the node table. Until
-- the `init` event has run, an action may wrap a slot with node:wrap(slot, function(old) return
-- new end); after it, assigning or removing a slot raises an error naming it. Other keys of the
-- node (an action's own state, the round) stay free.
-- An action's handlers may also declare `outgoing = function(node, flat, round) -> tensor`: a
-- modifier of the model vector the node sends, applied in action order before the transforms,
-- declared once at build time. An action that keeps state across rounds declares `checkpoint =
-- function(node) -> plain table` and `restore = function(node, t)` (see dpy.checkpoint): what a
-- checkpoint saves of it, and how a resumed run puts it back (after init, before startup).
local tensor = require "dpy.tensor"
local registry = require "dpy.registry"
local data = require "dpy.data"
local trainer = require "dpy.trainer"
local metrics = require "dpy.metrics"
local log = require "dpy.log"
local transforms = require "dpy.transforms"
local options = require "dpy.options"
local config_modules = require "dpy.config_modules"

local M = {}

-- Modules only a node's build uses (reading graph.json and partition.pt, the contracts' checks):
-- required where used, and let go of once the node is built. A later require loads them again;
-- none registers anything as it loads. A node of a fixed graph never loads the launcher's
-- dpy.config (it reads back the values, M.config_text), dpy.layout (its checks) and dpy.graph (the
-- builders): 63 KB of bytecode a node.
local BUILD_ONLY = { "dpy.layout_files", "dpy.contracts" }

--- The events an action may handle, in the order a run fires them.
M.EVENTS = { init = true, startup = true, pre_train = true, post_train = true,
             pre_exchange = true, post_exchange = true, shutdown = true }

--- The slots of the container.
M.SLOTS = {}
for _, k in ipairs { "uid", "cfg", "dir", "endpoint", "log", "metrics", "train_set", "test_set", "task",
                     "model", "optimizer", "loader", "trainer", "indices", "local_steps", "graph", "sharing",
                     "chain", "algorithm", "test_indices", "evaluates", "is_server", "handlers",
                     "modifiers", "checkpointers" } do
  M.SLOTS[k] = true
end

--- What a node offers (its methods); M.Node.__index is the table of them.
local Node = {}

-- Each node's private state, out of the reach of the node table: its slots and whether it is locked.
local STATE = setmetatable({}, { __mode = "k" })

-- dpy-lua attach's add_action of an action that replaces slot k: only the config's actions may.
local function not_addable(name, k)
  return string.format("add_action: %s: replaces the node's %s (node:wrap), which only an action given in the "
                       .. "config can do", name, k)
end

local function slot_error(node, k, locked)
  return string.format("node %d: '%s' is a component of the node's container%s; an action replaces "
                       .. "a component with node:wrap('%s', function(old) return new end), in its new() "
                       .. "or its init handler", STATE[node].slots.uid, k,
                       locked and ", locked after init: it cannot be replaced now" or "", k)
end

-- What node:wrap re-points when a slot changes: the components built from the old one.
local DEPENDENTS = {
  train_set = function(c, new) if c.loader then c.loader.ds = new end end,
  loader = function(c, new) if c.trainer then c.trainer.loader = new end end,
  optimizer = function(c, new) if c.trainer then c.trainer.opt = new end end,
  model = function(c)
    if c.optimizer then
      return "the optimizer was built from its parameters: a different network is a model component "
             .. "(config key model, or the path of a model file)"
    end
  end,
}

local function new_node(slots)
  local node = {}
  STATE[node] = { slots = slots, locked = false }
  return setmetatable(node, {
    __metatable = "dpy.Node",   -- getmetatable cannot reach, setmetatable cannot replace, the lock
    __index = function(_, k)
      local v = slots[k]
      if v ~= nil then return v end
      if k == "outgoing" then
        error("node.outgoing is gone: an action declares its modifier of the sent model once, as "
              .. "`outgoing = function(node, flat, round) return tensor end` in the table its new() returns", 2)
      end
      return Node[k]
    end,
    __newindex = function(t, k, v)
      if M.SLOTS[k] then error(slot_error(t, k, STATE[t].locked), 2) end
      rawset(t, k, v)
    end,
    -- pairs(node): its own fields, components and methods, what help(node) and Tab list
    __pairs = function(t)
      local all = {}
      for _, from in ipairs { t, slots, Node } do
        for k, v in next, from do
          if all[k] == nil then all[k] = v end
        end
      end
      return next, all, nil
    end,
  })
end

--- node:wrap(slot, fn): replaces component slot by fn(current) (which must return the new one),
-- and re-points the components built from it (the loader at a new training set, the trainer at a
-- new loader or optimizer); only while the container is built and during init. Raises otherwise.
function Node:wrap(k, fn)
  local state = STATE[self]
  if not M.SLOTS[k] then
    error(string.format("node:wrap: no component slot '%s'%s", tostring(k), options.suggest(k, M.SLOTS)), 2)
  end
  if state.adding then error(not_addable(state.adding, k), 0) end   -- the node runs: its components stay
  if state.locked then error(slot_error(self, k, true), 2) end
  local refuse = DEPENDENTS[k] and DEPENDENTS[k](state.slots)
  if refuse then error(string.format("node:wrap('%s'): %s", k, refuse), 2) end
  local new = fn(state.slots[k])
  if new == nil then error(string.format("node:wrap('%s'): the function returned nil", k), 2) end
  if DEPENDENTS[k] then DEPENDENTS[k](state.slots, new) end
  state.slots[k] = new
  return new
end

--- Locks the container (after the init event); raises when a slot was set around it (rawset).
function M.lock(node)
  for k in pairs(M.SLOTS) do
    if rawget(node, k) ~= nil then
      error(string.format("node %d: '%s' was set on the node table itself (rawset), around the container",
                          STATE[node].slots.uid, k), 0)
    end
  end
  STATE[node].locked = true
end

--- node:train([steps = local_steps]) -> mean loss
function Node:train(steps)
  if not self.trainer then error("node " .. self.uid .. " is a server: it does not train", 2) end
  self.model:own_flat()   -- the optimizer writes the parameters in place
  return self.trainer:run(steps or self.local_steps)
end

--- node:evaluate() -> test loss, test accuracy
function Node:evaluate()
  return trainer.evaluate(self.model, self.test_set, { batch_size = self.cfg.eval_batch_size,
                                                       indices = self.test_indices, loss = self.cfg.loss,
                                                       task = self.task })
end

--- node:neighbours() -> the uids this node exchanges with (graph algorithms)
function Node:neighbours()
  return self.graph and self.graph.adj[self.uid] or {}
end

--- node:fire(event, ...) runs the actions' handlers of event.
function Node:fire(event, ...)
  -- a handler or a client's code may write the model: never the parameters another node reads
  local handlers = self.handlers[event]
  if handlers then self.model:own_flat() end
  for _, h in ipairs(handlers or {}) do h(self, ...) end
  local conn, id, code, kind = self.endpoint:attach_poll()   -- what an attached client queued
  if conn or self.attach_breaks then
    self.model:own_flat()
    require("dpy.attach.node").event(self, event, conn, id, code, kind)
  end
end

--- Whether node 0 is a server that does not train (fedavg, ps): the algorithm's spec says.
function M.has_server(cfg) return registry.spec("algorithm", cfg.algorithm, 2).server == true end

--- Whether uid evaluates: every node, or a seeded sample of eval_nodes (the server always). The
-- sample is drawn once per process, a byte per node its nodes share (data.shared): a draw of every
-- node's was O(nodes) a node (8,192 nodes: 1.3 ms and a table of 8,192 uids each).
function M.evaluates(cfg, uid)
  if M.has_server(cfg) then return uid == 0 end
  if not cfg.eval_nodes or cfg.eval_nodes >= cfg.nodes then return true end
  local key = string.format("evaluators: seed %d, %d nodes, %d sampled", cfg.seed, cfg.nodes, cfg.eval_nodes)
  local shared = data.shared(key, function()
    local all, chosen = {}, {}
    for u = 0, cfg.nodes - 1 do all[u + 1], chosen[u + 1] = u, 0 end
    require("dpy.random").new(cfg.seed):shuffle(all)
    for i = 1, cfg.eval_nodes do chosen[all[i] + 1] = 1 end
    return { chosen = tensor.new(chosen, "uint8") }
  end)
  local chosen <close> = shared.chosen
  return chosen[uid]:item() == 1
end

-- Builds the config's actions on node: their handlers by event, and their outgoing modifiers.
local function build_actions(node, list)
  local handlers, modifiers, savers = {}, {}, {}
  for i, entry in ipairs(list or {}) do
    local spec = registry.spec("action", entry, 2)
    local returned = registry.build("action", entry, node) or {}
    if (returned.checkpoint == nil) ~= (returned.restore == nil) then
      error(string.format("action '%s': checkpoint and restore go together", spec.name), 0)
    end
    if returned.checkpoint ~= nil then
      options.check_type(returned.checkpoint, "function", string.format("action '%s': checkpoint", spec.name), 0)
      options.check_type(returned.restore, "function", string.format("action '%s': restore", spec.name), 0)
      savers[#savers + 1] = { name = spec.name, index = i, checkpoint = returned.checkpoint,
                              restore = returned.restore }
    end
    for event, h in pairs(returned) do
      if event == "outgoing" then
        options.check_type(h, "function", string.format("action '%s': outgoing", spec.name), 0)
        modifiers[#modifiers + 1] = { action = spec.name, modify = h }
      elseif not M.EVENTS[event] and event ~= "checkpoint" and event ~= "restore" then
        -- named at its handler's line (where the misspelt key is written), else by the action's file
        local at = type(h) == "function" and debug.getinfo(h, "S")
        at = at and at.linedefined > 0 and at.short_src .. ":" .. at.linedefined .. ": "
             or spec.path and spec.path .. ": " or ""
        error(string.format("%saction '%s': unknown event '%s'%s (events: init, startup, pre_train, "
                            .. "post_train, pre_exchange, post_exchange, shutdown; outgoing, a modifier; checkpoint "
                            .. "and restore)",
                            at, spec.name, tostring(event), options.suggest(event, M.EVENTS)), 0)
      elseif M.EVENTS[event] then
        handlers[event] = handlers[event] or {}
        table.insert(handlers[event], h)
      end
    end
  end
  return handlers, modifiers, savers
end

--- container.model(cfg, train_set) -> the config's model for that dataset (a binary task has one
-- output, whatever the dataset's classes).
function M.model(cfg, train_set)
  local shape_of = train_set
  if cfg.task == "binary" then shape_of = setmetatable({ classes = 1 }, { __index = train_set }) end
  return registry.build("model", cfg.model, { dataset = shape_of })
end

--- The launcher's config as the text a node reads back (args.config): the values it checked, the
-- directories of its files (where require finds the config's own modules) and the modules those
-- files required, written once per process (dpy.serialize: floats bit for bit), so that no node
-- loads and checks the config files again (0.26-0.31 ms of a node's start, measured in a fresh
-- state, and 22 KB of bytecode).
function M.config_text(cfg)
  local modules = require("dpy.config").modules(cfg)
  return require("dpy.serialize").value({ values = cfg, dirs = modules.dirs, requires = modules.requires }, "config")
end

-- The config a node reads back from M.config_text; its modules required as the config's files did
-- (a module may register a component the config names).
local function read_config(text)
  local t = assert(load("return " .. text, "=(config)", "t", {}))()
  for _, dir in ipairs(t.dirs) do config_modules.add(dir) end
  for _, name in ipairs(t.requires) do require(name) end
  return t.values
end

-- The node's clock (dpy.simclock): stragglers and the simulated clock. A run with neither loads
-- no dpy.simclock (nor dpy.random): its nodes' clock never slows them, with the fields of
-- simclock.new's (round_timeout reads `late`, dpy.node `simulated`, the README lists `now`).
local STEADY = { factor = 1, simulated = false, traced = false, now = 0, sent = 0, done = 0, late = 0,
                 slowdown = function() return 1 end }
local function clock(cfg, uid)
  if not (cfg.stragglers or cfg.sim_clock) then return STEADY end
  return require("dpy.simclock").new(cfg, uid)
end

--- Builds the node's components; returns the node table that actions see (not yet locked).
-- args = { config = M.config_text(cfg), dir, t0, resume } (see l_nodes.c).
function M.build(ep, args)
  local uid = ep:uid()
  local files = require "dpy.layout_files"
  local cfg = read_config(args.config)
  args.config = nil   -- node.main keeps args for the run: not the text in every node's heap
  local c = { uid = uid, cfg = cfg, dir = args.dir, endpoint = ep }
  local node = new_node(c)   -- c: the slots, filled here; after this function only node:wrap changes them
  node.round, node.t0 = 0, tonumber(args.t0)
  node.simclock = clock(cfg, uid)
  c.log = assert(log.open(string.format("%s/%d.log", args.dir, uid), uid))
  c.metrics = metrics.new(uid, string.format("%s/%d.metrics.json", args.dir, uid))
  -- the same initial model on every node; data order and dropout from the node's own stream
  tensor.manual_seed(cfg.seed)
  c.train_set = registry.build("dataset", cfg.dataset, { train = true })
  c.test_set = registry.build("dataset", cfg.dataset, { train = false })
  if cfg.task == "binary" then c.task = trainer.binary(cfg.positive_classes, c.train_set.classes) end
  c.model = M.model(cfg, c.train_set)
  tensor.manual_seed(cfg.seed * 1000003 + uid + 1)
  local server = M.has_server(cfg)
  c.is_server = server and uid == 0
  if not c.is_server then
    local parts_n = server and cfg.nodes - 1 or cfg.nodes
    c.indices = files.load_part(args.dir, server and uid or uid + 1, parts_n)
    c.loader = data.loader(c.train_set, { batch_size = cfg.batch_size, indices = c.indices })
  end
  c.optimizer = registry.build("optimizer", cfg.optimizer, { model = c.model, config = cfg })
  if c.loader then
    c.trainer = trainer.new { model = c.model, optimizer = c.optimizer, loader = c.loader, loss = cfg.loss,
                              task = c.task }
    c.local_steps = cfg.local_epochs and cfg.local_epochs * #c.loader or cfg.local_steps
  end
  local algorithm = registry.spec("algorithm", cfg.algorithm)
  if algorithm.graph then c.graph = files.load_graph(args.dir) end
  if algorithm.graph or algorithm.sharing then   -- sharing: a rule without a config graph (epidemic)
    c.sharing = registry.build("sharing", cfg.sharing, node)
  end
  local own = c.sharing and c.sharing.payload   -- a rule with a payload of its own (topk, choco)
  c.chain = transforms.chain(cfg.transforms, own and { dtype = own, bound = c.sharing.bound })
  if cfg.test_samples then c.test_indices = tensor.arange(math.min(cfg.test_samples, data.size(c.test_set))) end
  c.evaluates = M.evaluates(cfg, uid)
  c.algorithm = registry.build("algorithm", cfg.algorithm, node)
  c.handlers, c.modifiers, c.checkpointers = build_actions(node, cfg.actions)
  -- the nodes of a process hold one copy of the initial model until each writes its own
  c.model:share_initial()
  return node
end

--- container.add_action(node, spec) -> the action's name: an action added to a running node
-- (dpy-lua attach). Its handlers run from the next event on and its outgoing modifier from the
-- next send; its init handler does not run (the container is locked), nor is it checkpointed.
function M.add_action(node, spec)
  local state = STATE[node]
  -- its file or built-in module registers it now: the registry opens for that (frozen after init)
  local found, err = registry.thawed(registry.check, "action", spec)
  if not found then error("add_action: " .. err, 0) end
  local name = found.name
  if found.wraps then error(not_addable(name, found.wraps), 0) end   -- on every node, chosen or not
  state.adding = name
  local ok, handlers, modifiers, savers = pcall(registry.thawed, build_actions, node, { spec })
  state.adding = nil
  if not ok then error(handlers, 0) end
  if #savers > 0 then error("add_action: an action that keeps checkpoint state is given in the config", 2) end
  for event, list in pairs(handlers) do
    local into = node.handlers[event] or {}
    node.handlers[event] = into
    for _, h in ipairs(list) do into[#into + 1] = h end
  end
  for _, m in ipairs(modifiers) do node.modifiers[#node.modifiers + 1] = m end
  return name
end

--- Builds node and runs its init event, then locks its container and the registry.
function M.open(ep, args)
  local node = M.build(ep, args)
  node:fire("init")
  M.lock(node)
  registry.freeze()
  for _, name in ipairs(BUILD_ONLY) do package.loaded[name] = nil end
  -- with release_memory, frees them and the build's garbage now, before the rounds' peak: 0.2 ms
  -- (2048 nodes, 3 rounds: 2.72 -> 2.62 MiB a node at the peak, and unchanged without it)
  if node.cfg.release_memory then collectgarbage() end
  return node
end

return M
