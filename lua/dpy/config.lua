--- dpy.config: loading an experiment config. A config is a Lua file of assignments
-- (`epochs = 2`, `optimizer = { "sgd", lr = 0.05 }`) run in a strict sandbox: each assignment
-- is checked as it happens, so an unknown key, a wrong type or a misspelt component name is
-- reported with the config's file and line, and the nearest valid name. include("other.lua")
-- runs another config first (a path relative to the including file), so a variant states only
-- what it changes.
local registry = require "dpy.registry"
local options = require "dpy.options"
require "dpy.components"
require "dpy.graph"
require "dpy.partition"
require "dpy.sharing"
require "dpy.transforms"

local M = {}

--- The keys a config may set: type or registry kind, default, and a short doc.
M.SCHEMA = {
  name = { type = "string", doc = "a label for the run (default: the config's file name)" },
  seed = { type = "integer", default = 1, doc = "seeds weights, shuffling and partitions" },
  dataset = { kind = "dataset", default = "fashion_mnist", doc = "training and test data" },
  model = { kind = "model", default = "cnn", doc = "the network" },
  optimizer = { kind = "optimizer", default = { "sgd", lr = 0.01, momentum = 0.9 },
                doc = "the local optimizer" },
  loss = { type = "string", default = "cross_entropy",
           one_of = { "cross_entropy", "nll", "mse", "bce_with_logits" }, doc = "training loss" },
  batch_size = { type = "integer", default = 32, min = 1, doc = "training batch size" },
  epochs = { type = "integer", default = 2, min = 1, doc = "passes over the training data" },
  max_steps = { type = "integer", min = 1, doc = "stop after this many steps (default: none)" },
  eval_every = { type = "integer", min = 1,
                 doc = "centralized: steps between evaluations (default: 4 per epoch); "
                       .. "decentralized: rounds between evaluations (default: 10)" },
  eval_batch_size = { type = "integer", default = 100, min = 1, doc = "evaluation batch size" },
  train_samples = { type = "integer", min = 1, doc = "use only the first N training samples" },
  test_samples = { type = "integer", min = 1, doc = "evaluate on the first N test samples" },
  threads = { type = "integer", min = 1,
              doc = "libtorch threads (default: the cores; 1 per node in decentralized runs)" },
  task = { type = "string", default = "multiclass", one_of = { "multiclass", "binary" },
           doc = "binary: positive_classes against the rest, one logit, bce_with_logits" },
  positive_classes = { type = "table", default = { 0 }, doc = "binary task: the classes labelled 1" },
  -- decentralized runs (setting `nodes` makes a run decentralized)
  nodes = { type = "integer", min = 1, doc = "number of nodes" },
  processes = { type = "integer", default = 1, min = 1, doc = "processes on this machine" },
  graph = { kind = "graph", default = { "regular", degree = 4 }, doc = "topology (D-PSGD)" },
  partition = { kind = "partitioner", default = "iid", doc = "how training data is split" },
  rounds = { type = "integer", default = 100, min = 1, doc = "communication rounds" },
  local_steps = { type = "integer", default = 10, min = 1, doc = "training steps per round" },
  local_epochs = { type = "integer", min = 1, doc = "passes over the node's shard per round (instead of local_steps)" },
  algorithm = { type = "string", default = "dpsgd", one_of = { "dpsgd", "fedavg", "ps" },
                doc = "dpsgd (gossip averaging), fedavg (server = node 0), ps (parameter server = node 0)" },
  fraction = { type = "number", default = 1.0, doc = "fedavg: fraction of clients per round" },
  eval_nodes = { type = "integer", min = 1, doc = "evaluate a seeded sample of this many nodes (default: all)" },
  on_peer_failure = { type = "string", default = "abort", one_of = { "abort", "continue" },
                      doc = "when a peer dies or is silent past peer_timeout" },
  peer_timeout = { type = "number", default = 300, doc = "seconds to wait for a peer's message" },
  actions = { type = "table", default = {}, doc = "actions: names or paths of Lua files" },
  slots = { type = "integer", min = 1, doc = "nodes computing at once per process (default: cores)" },
  pin_slots = { type = "boolean", default = true,
                doc = "run each compute slot on its own core (when slots >= the process's CPUs)" },
  port = { type = "integer", min = 1024, doc = "first tcp port (default: derived from the run id)" },
  host = { type = "string", default = "127.0.0.1", doc = "address the processes listen on" },
  faults = { type = "table", doc = "fault injection: { drop =, duplicate =, corrupt =, delay = }" },
  sharing = { kind = "sharing", default = "average",
              doc = "D-PSGD: how a node combines its model with its neighbours' (average, trimmed_mean)" },
  transforms = { type = "table", default = {}, chain = true,
                 doc = "state transforms applied in order to every shared vector, undone in reverse" },
}

local SAFE = {
  math = math, string = string, table = table, ipairs = ipairs, pairs = pairs, type = type,
  tostring = tostring, tonumber = tonumber, select = select, error = error, assert = assert,
  print = print, os = { getenv = os.getenv, time = os.time, date = os.date },
}

--- nil when value is valid for key, else a message.
function M.check(key, value)
  local s = M.SCHEMA[key]
  if not s then
    return string.format("unknown config key '%s'%s", tostring(key), options.suggest(key, M.SCHEMA))
  end
  if s.kind then
    local _, err = registry.check(s.kind, value)
    return err and string.format("%s: %s", key, err)
  end
  local got = math.type(value) or type(value)
  if got ~= s.type and not (s.type == "number" and type(value) == "number") then
    return string.format("config key '%s' must be a%s %s, got %s", key,
                         s.type:match("^[aeiou]") and "n" or "", s.type, got)
  end
  if s.chain then
    local ok, err = pcall(require("dpy.transforms").chain, value)
    return not ok and err or nil
  end
  if s.min and value < s.min then
    return string.format("config key '%s' must be >= %s, got %s", key, s.min, value)
  end
  if s.one_of then
    for _, v in ipairs(s.one_of) do if v == value then return nil end end
    return string.format("config key '%s' must be one of %s, got '%s'%s", key,
                         table.concat(s.one_of, ", "), tostring(value), options.suggest(value, s.one_of))
  end
end

local load_into

-- The sandbox: reads see config values set so far, then SAFE (and include); writes are checked.
local function sandbox(values, dir, depth, included)
  local function include(path)
    if type(path) ~= "string" then error("include: a path expected", 2) end
    if depth >= 8 then error("include: nested too deep (a cycle?)", 2) end
    local full = path:sub(1, 1) == "/" and path or dir .. "/" .. path
    included[#included + 1] = { path = path, full = full }
    load_into(full, values, depth + 1, included)
  end
  return setmetatable({}, {
    __index = function(_, k)
      if values[k] ~= nil then return values[k] end
      if SAFE[k] ~= nil then return SAFE[k] end
      if k == "include" then return include end
      error(string.format("undefined variable '%s'", tostring(k)), 2)
    end,
    __newindex = function(_, k, v)
      local err = M.check(k, v)
      if err then error(err, 2) end
      values[k] = v
    end,
  })
end

--- Parses "KEY=VALUE" (VALUE as a Lua expression, else as a string) -> key, value | nil, err
function M.parse_override(arg)
  local key, text = arg:match("^([%a_][%w_]*)=(.*)$")
  if not key then return nil, string.format("'%s' is not KEY=VALUE", arg) end
  local chunk = load("return " .. text, "=override", "t", {})
  local ok, value = false, nil
  if chunk then ok, value = pcall(chunk) end
  if not ok or value == nil then value = text end
  return key, value
end

-- Runs the config file at path into values (include() runs another one, relative to it).
function load_into(path, values, depth, included)
  local f, err = io.open(path, "rb")
  if not f then error(string.format("cannot read config: %s", err), 0) end
  local source = f:read("a")
  f:close()
  local chunk, lerr = load(source, "@" .. path, "t", sandbox(values, path:match("^(.*)/[^/]*$") or ".", depth,
                                                       included))
  if not chunk then error(lerr, 0) end
  local ok, result = pcall(chunk)
  if not ok then error(result, 0) end
  if type(result) == "table" then   -- `return { ... }` configs are checked key by key
    for k, v in pairs(result) do
      local e = M.check(k, v)
      if e then error(string.format("%s: %s", path, e), 0) end
      values[k] = v
    end
  end
  return source
end

--- Loads path and applies the overrides (a list of "KEY=VALUE"); returns the config with every
-- default filled in, its source, and the files it included ({ {path = as written, full}, ... });
-- raises with file and line.
function M.load(path, overrides)
  local values, included = {}, {}
  local source = load_into(path, values, 0, included)
  for _, o in ipairs(overrides or {}) do
    local key, value = M.parse_override(o)
    if not key then error("command line: " .. value, 0) end
    local e = M.check(key, value)
    if e then error(string.format("command line: %s: %s", o, e), 0) end
    values[key] = value
  end
  for k, s in pairs(M.SCHEMA) do
    if values[k] == nil then values[k] = s.default end
  end
  values.name = values.name or path:match("([^/]+)%.lua$") or path
  return values, source, included
end

return M
