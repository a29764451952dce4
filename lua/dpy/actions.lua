--- dpy.actions: loading a node's actions. An action is a Lua file that registers one spec of
-- kind "action": { kind = "action", name, new = function(cfg, node) return handlers end }, where
-- handlers maps events (init, startup, pre_train, post_train, pre_exchange, post_exchange,
-- shutdown) to functions(node, round). Handlers may observe or change the node: wrap
-- node.loader or node.trainer, push a function onto node.outgoing (applied to the model vector
-- before it is sent), write node.metrics.
-- A config names actions in a list: "name" (lua/dpy/actions/<name>.lua), "path/to/file.lua", or
-- { "name or path", option = value, ... }.

local M = {}

M.EVENTS = { init = true, startup = true, pre_train = true, post_train = true,
             pre_exchange = true, post_exchange = true, shutdown = true }

local function load_spec(ref)
  if ref:match("%.lua$") then
    local f, err = io.open(ref, "r")
    if not f then error("action file: " .. err, 0) end
    local src = f:read("a")
    f:close()
    local chunk, lerr = load(src, "@" .. ref, "t", setmetatable({}, { __index = _G }))
    if not chunk then error(lerr, 0) end
    local spec = chunk()
    if type(spec) ~= "table" or spec.kind ~= "action" then
      error(ref .. ": an action file must return registry.register{ kind = \"action\", ... }", 0)
    end
    return spec
  end
  local ok, spec = pcall(require, "dpy.actions." .. ref)
  if not ok then
    if tostring(spec):match("module 'dpy%.actions%." .. ref:gsub("%p", "%%%0") .. "' not found") then
      error(string.format("no action named '%s' (built-in actions live in lua/dpy/actions/; "
                          .. "a path must end in .lua)", ref), 0)
    end
    error(spec, 0)
  end
  return spec
end

--- The nodes an attack action picks (sorted uids, the same in every process): opts.nodes, or a
-- seeded fraction of the training nodes (opts.fraction, opts.seed or the run's seed).
function M.choose_nodes(opts, cfg, what)
  local first = (cfg.algorithm == "fedavg" or cfg.algorithm == "ps") and 1 or 0   -- not the server
  if opts.nodes then
    for _, u in ipairs(opts.nodes) do
      if math.type(u) ~= "integer" or u < first or u >= cfg.nodes then
        error(string.format("%s: nodes lists %s, not a training node (%d..%d)", what, tostring(u),
                            first, cfg.nodes - 1), 0)
      end
    end
    local list = { table.unpack(opts.nodes) }
    table.sort(list)
    return list
  end
  local fraction = opts.fraction or 0
  if type(fraction) ~= "number" or fraction < 0 or fraction > 1 then
    error(what .. ": fraction must be in [0, 1]", 0)
  end
  local candidates = {}
  for u = first, cfg.nodes - 1 do candidates[#candidates + 1] = u end
  require("dpy.random").new((opts.seed or cfg.seed) * 104729 + 17):shuffle(candidates)
  local list = { table.unpack(candidates, 1, math.floor(fraction * #candidates + 0.5)) }
  table.sort(list)
  return list
end

--- Whether node is among the nodes an attack action picks.
function M.is_chosen(opts, node, what)
  for _, u in ipairs(M.choose_nodes(opts, node.cfg, what)) do
    if u == node.uid then return true end
  end
  return false
end

--- What the built-in actions of cfg record in the manifest: { [name] = table } for each action
-- whose spec has manifest(opts, cfg) (action files are loaded by the nodes only).
function M.manifest(cfg)
  local out = {}
  for _, entry in ipairs(cfg.actions or {}) do
    local ref = type(entry) == "table" and entry[1] or entry
    if type(ref) == "string" and not ref:match("%.lua$") then
      local spec = load_spec(ref)
      if spec.manifest then out[spec.name] = spec.manifest(type(entry) == "table" and entry or {}, cfg) end
    end
  end
  return next(out) and out or nil
end

--- Loads the actions of a config for node; returns { [event] = { handler, ... } }.
function M.load(list, node)
  local handlers = {}
  for i, entry in ipairs(list or {}) do
    local ref = type(entry) == "table" and entry[1] or entry
    if type(ref) ~= "string" then error(string.format("actions[%d]: a name or a path expected", i), 0) end
    local spec = load_spec(ref)
    local opts = type(entry) == "table" and entry or {}
    if spec.options then
      local ok, err = pcall(require("dpy.options").check, opts, spec.options, "action '" .. spec.name .. "'", 0)
      if not ok then error(err, 0) end
    end
    for event, h in pairs(spec.new(opts, node) or {}) do
      if not M.EVENTS[event] then
        error(string.format("action '%s': unknown event '%s'", spec.name, tostring(event)), 0)
      end
      handlers[event] = handlers[event] or {}
      table.insert(handlers[event], h)
    end
  end
  return handlers
end

return M
