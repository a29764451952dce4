--- dpy.config: loading an experiment config. A config is a Lua file of assignments
-- (`epochs = 2`, `optimizer = { "sgd", lr = 0.05 }`) run in a strict sandbox: each assignment
-- is checked as it happens, so an unknown key, a wrong type or a misspelt component name is
-- reported with the config's file and line, and the nearest valid name. include("other.lua")
-- runs another config first (a path relative to the including file), so a variant states only
-- what it changes.
local registry = require "dpy.registry"
local options = require "dpy.options"
local paths = require "dpy.paths"
local churn = require "dpy.churn"
local config_modules = require "dpy.config_modules"

local M = {}

-- The longest wait in seconds a key takes: a deadline past what a timespec holds (1e300) made a
-- node's wait return at once, over and over, for ever.
local LONGEST = 1000000000

-- sim_clock's and faults' rule: a range of bandwidths is below its top, a range of latencies above
-- its bottom (one upside down was drawn reversed by the simulated clock, ignored by the fabric).
local function bandwidths(t)
  if t.bandwidth_min and not (t.bandwidth and t.bandwidth_min < t.bandwidth) then
    return "bandwidth_min needs bandwidth, and must be below it"
  end
  if t.latency_max and t.latency_max <= (t.latency or 0) then
    return string.format("latency_max must be above latency (%s)", tostring(t.latency or 0))
  end
end

--- The keys a config may set: a rule of dpy.options (type, bounds, one_of, default, doc), or a
-- registry kind (`kind`: one component entry; `list_of`: a list of them).
M.SCHEMA = {
  name = { type = "string", doc = "a label for the run (default: the config's file name)" },
  seed = { type = "integer", default = 1, doc = "seeds weights, shuffling and partitions",
           check = function(v)   -- JSON readers hold integers up to 2^53 exactly, cjson's and jq's too
             if v > 9007199254740991 or v < -9007199254740991 then
               return "must lie within -9007199254740991..9007199254740991 (2^53 - 1), the integers that "
                      .. "manifest.json and config.json hold as they are for every JSON reader (jq, JavaScript, "
                      .. "this run's own rewrites of its manifest), got " .. string.format("%d", v)
             end
           end },
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
  threads = { type = "integer", min = 1, max = 65536,   -- libtorch's is a C int
              doc = "libtorch threads (default: the cores; 1 per node in decentralized runs)" },
  task = { type = "string", default = "multiclass", one_of = { "multiclass", "binary" },
           doc = "binary: positive_classes against the rest, one logit, bce_with_logits" },
  positive_classes = { type = "list", of = "integer", min = 0, default = { 0 },
                       check = function(v) if #v == 0 then return "must list one class or more" end end,
                       doc = "binary task: the classes labelled 1" },
  -- decentralized runs (setting `nodes` makes a run decentralized)
  nodes = { type = "integer", min = 1, doc = "number of nodes" },
  processes = { type = "integer", default = 1, min = 1, doc = "processes on this machine" },
  graph = { kind = "graph", default = { "regular", degree = 4 }, doc = "topology (D-PSGD)" },
  partition = { kind = "partitioner", default = "iid", doc = "how training data is split" },
  rounds = { type = "integer", default = 100, min = 1, doc = "communication rounds" },
  local_steps = { type = "integer", default = 10, min = 1, doc = "training steps per round" },
  local_epochs = { type = "integer", min = 1, doc = "passes over the node's shard per round (instead of local_steps)" },
  reset_optimizer = { type = "boolean", default = false,
                      doc = "drop the optimizer's state (momentum, moments) before each round's training, "
                            .. "as DecentralizePy's reset_optimizer (its default there)" },
  algorithm = { kind = "algorithm", default = "dpsgd",
                doc = "dpsgd (gossip averaging), fedavg (server = node 0), ps (parameter server = node 0), "
                      .. "or the path of a Lua file" },
  fraction = { type = "number", default = 1.0, above = 0, max = 1, doc = "fedavg: fraction of clients per round" },
  eval_nodes = { type = "integer", min = 1, doc = "evaluate a seeded sample of this many nodes (default: all)" },
  on_peer_failure = { type = "string", default = "abort", one_of = { "abort", "continue" },
                      doc = "when a peer dies or is silent past peer_timeout" },
  peer_timeout = { type = "number", default = 300, above = 0, max = LONGEST,
                   doc = "seconds to wait for a peer's message" },
  round_timeout = { type = "number", above = 0, max = LONGEST,
                    doc = "dpsgd, epidemic: seconds a round waits for its peers' models (from the end of its sends); "
                          .. "it aggregates what came, a later one is dropped and counted (late_messages) "
                          .. "(default: none, wait up to peer_timeout)" },
  stragglers = { type = "table",
                 doc = "per-node compute slowdowns: { factors = { ... } } in uid order, { fraction =, slowdown = } "
                       .. "(a seeded fraction of the nodes), { lognormal = sigma }, or { trace = file } (a row per "
                       .. "round, a column per node; see dpy.trace)",
                 fields = {
                   -- at most LONGEST: a node waits (slowdown - 1) times its training, and 1e300 failed it there
                   factors = { type = "list", of = "number", above = 0, max = LONGEST,
                               doc = "each node's slowdown, in uid order" },
                   fraction = { type = "number", min = 0, max = 1, doc = "the share of nodes slowed down" },
                   slowdown = { type = "number", above = 0, max = LONGEST, doc = "how many times slower they compute" },
                   lognormal = { type = "number", min = 0, doc = "sigma of exp(sigma N(0, 1)) factors" },
                   trace = { type = "path", exists = "file",
                             doc = "a CSV (or *.json) file: a row of slowdowns per round, a column per node" },
                 } },
  sim_clock = { type = "table",
                doc = "dpsgd, epidemic: a simulated clock (sim_seconds): training at step_seconds per step "
                      .. "times the node's slowdown, per-link latency (see dpy.simclock)",
                fields = {
                  step_seconds = { type = "number", above = 0, required = true,
                                   doc = "simulated seconds of one local step at slowdown 1" },
                  latency = { type = "number", min = 0, doc = "seconds a message takes on a link (0)" },
                  latency_max = { type = "number", min = 0,
                                  doc = "with it, a link's latency: a seeded draw in [latency, latency_max)" },
                  bandwidth = { type = "number", above = 0,
                                doc = "bytes per second of a link: a model takes its bytes / bandwidth more (none)" },
                  bandwidth_min = { type = "number", above = 0,
                                    doc = "with it, a link's bandwidth: a seeded draw in [bandwidth_min, bandwidth)" },
                }, check = bandwidths },
  churn = { type = "table", check = churn.check,
            doc = "dpsgd, epidemic: nodes absent for some rounds, { { uid =, leave = (first absent round), "
                  .. "rejoin = (first round back) }, ... } or seeded { fraction =, leave_rounds = } (see dpy.churn)" },
  stop_grace = { type = "number", default = 15, above = 0,
                 doc = "seconds a child process gets to stop (after a failure or a signal, or silent) before "
                       .. "SIGTERM, and then SIGKILL" },
  checkpoint_every = { type = "integer", min = 1,
                       doc = "write each node's whole state every this many rounds (ckpt/<uid>/<round>.ckpt), "
                             .. "for `dpy-lua run --resume` (default: none)" },
  actions = { list_of = "action", default = {}, doc = "actions: names or paths of Lua files" },
  slots = { type = "integer", min = 1, max = 65536, doc = "nodes computing at once per process (default: cores)" },
  huge_pages = { type = "boolean", default = true,
                 doc = "memory in transparent huge pages once a process's nodes are built (they start in 4 KiB "
                       .. "pages): rounds a little faster, for a little more memory (false: for runs at the edge "
                       .. "of the machine's memory)" },
  release_memory = { type = "boolean", default = false,
                     doc = "give back to the system the pages the rounds free and no round takes again for 10 s "
                           .. "(false: a process keeps them once its nodes are built, for the next rounds: rounds "
                           .. "11-33 % shorter at 64-8192 nodes, for 1-5 % more memory)" },
  pin_slots = { type = "boolean", default = true,
                doc = "run each compute slot on its own core (when slots >= the process's CPUs)" },
  port = { type = "integer", min = 1024, max = 65535,
           doc = "first tcp port (default: derived from the run id); process p listens on port + p" },
  host = { type = "string", default = "127.0.0.1", doc = "address the processes listen on" },
  encrypt = { type = "boolean", default = false,
              doc = "encrypt the payloads between processes connected by tcp (each such packet is authenticated "
                    .. "either way; on a Unix socket, unix_sockets, only the kernel carries them)" },
  unix_sockets = { type = "boolean", default = true,
                   doc = "processes on one machine exchange over a Unix socket, which only the kernel carries "
                         .. "(no tag or encryption needed), instead of tcp on loopback" },
  shared_memory = { type = "boolean", default = true,
                    doc = "there, models of 64 KiB or more cross through a ring of memory the two processes share "
                          .. "(the socket carries a word per piece) instead of the socket's buffers" },
  faults = { type = "table",
             doc = "fault injection: { drop =, duplicate =, corrupt =, delay = }, emulated link latency and bandwidth",
             fields = {
               drop = { type = "number", min = 0, max = 1, doc = "probability a message is lost" },
               duplicate = { type = "number", min = 0, max = 1, doc = "probability a message arrives twice" },
               corrupt = { type = "number", min = 0, max = 1,
                           doc = "probability a message is corrupted (the receiver must reject it)" },
               delay = { type = "number", min = 0, max = LONGEST, doc = "the longest delay, in seconds (uniform)" },
               latency = { type = "number", min = 0, max = LONGEST, doc = "every link's emulated latency, in seconds" },
               latency_max = { type = "number", min = 0, max = LONGEST,
                               doc = "with it, each directed link's latency: a seeded draw in [latency, latency_max)" },
               -- a byte a second at least: bytes / 1e-300 was a wait past what a timespec holds
               bandwidth = { type = "number", min = 1,
                             doc = "every link's emulated bytes per second: a message waits bytes / bandwidth more" },
               bandwidth_min = { type = "number", min = 1,
                                 doc = "with it, each directed link's bandwidth: a seeded draw in "
                                       .. "[bandwidth_min, bandwidth)" },
             }, check = bandwidths },
  sharing = { kind = "sharing", default = "average",
              doc = "D-PSGD: how a node combines its model with its neighbours' (average, trimmed_mean); "
                    .. "fedavg: what a client sends (average: its whole model; topk, random_subsample)" },
  transforms = { list_of = "transform", default = {}, chain = true,
                 doc = "state transforms applied in order to every shared vector, undone in reverse" },
}

-- The keys only one kind of run reads (`nodes` makes a run decentralized). A config of the other
-- kind that sets one is refused: its run would ignore it without a word (a centralized config's
-- differential_privacy action would train without the noise).
local ONLY = {
  centralized = { "epochs", "max_steps" },
  decentralized = { "processes", "graph", "partition", "rounds", "local_steps", "local_epochs", "reset_optimizer",
                    "algorithm", "fraction", "eval_nodes", "on_peer_failure", "peer_timeout", "round_timeout",
                    "stragglers", "sim_clock", "churn", "stop_grace", "checkpoint_every", "actions", "slots",
                    "huge_pages", "release_memory", "pin_slots", "port", "host", "encrypt", "unix_sockets",
                    "shared_memory", "faults",
                    "sharing", "transforms" },
}
for mode, keys in pairs(ONLY) do
  for _, k in ipairs(keys) do M.SCHEMA[k].mode = mode end
end

local SAFE = {
  math = math, string = string, table = table, ipairs = ipairs, pairs = pairs, type = type,
  tostring = tostring, tonumber = tonumber, select = select, error = error, assert = assert,
  print = print, os = { getenv = os.getenv, time = os.time, date = os.date }, require = require,
}

-- nil and a copy of a table-valued key's value with its path fields made absolute against base
-- (and added to used: the run directory copies them), or a message naming a missing file.
local function check_paths(key, value, fields, base, used)
  local out = {}
  for k, v in pairs(value) do
    local rule = fields[k]
    if type(rule) == "table" and rule.type == "path" then
      v = paths.absolute(v, base)
      local file = paths.is_file(v)
      if rule.exists == "file" and not file then
        return string.format("config key '%s': field '%s': no readable file %s", key, k, v)
      end
      if used and file then used[#used + 1] = v end
    end
    out[k] = v
  end
  return nil, out
end

--- nil and value (its component files and path options made absolute against base, the
-- config's directory) when value is valid for key, else a message.
function M.check(key, value, base, used)
  local s = M.SCHEMA[key]
  if not s then
    return string.format("unknown config key '%s'%s", tostring(key), options.suggest(key, M.SCHEMA))
  end
  if s.kind then
    local _, err, resolved = registry.check(s.kind, value, base, used)
    if err then return string.format("%s: %s", key, err) end
    return nil, resolved
  end
  if s.list_of then
    local bad = options.check_value(value, s)
    if bad then return string.format("config key '%s' %s", key, bad) end
    local list = {}
    for i, entry in ipairs(value) do
      local _, err, resolved = registry.check(s.list_of, entry, base, used)
      if err then return string.format("%s[%d]: %s", key, i, err) end
      list[i] = resolved
    end
    if s.chain then
      local ok, err = pcall(require("dpy.transforms").chain, list)
      if not ok then return err end
    end
    return nil, list
  end
  local err = options.check_value(value, s)
  if err then   -- a key's own check that names the key (churn: ..., churn[2]: ...) says it whole
    if err:sub(1, #key) == key and err:find("^[:%[]", #key + 1) then return err end
    return options.join(string.format("config key '%s'", key), err)
  end
  value = options.normalize(value, s)
  if s.fields and type(value) == "table" then return check_paths(key, value, s.fields, base, used) end
  return nil, value
end

local load_into
local WHERE = setmetatable({}, { __mode = "k" })   -- values -> key -> "file:line" of its last setting
-- values -> what a node needs to load as the config did: { dirs = the directories of its files,
-- requires = the names its files required }, each in order, each a list and a set of the same
local MODULES = setmetatable({}, { __mode = "k" })
local EFFECTIVE = setmetatable({}, { __mode = "k" })   -- values loaded from a run directory's record
local SET = setmetatable({}, { __mode = "k" })   -- values -> the keys its files and command line set

-- The sandbox: reads see config values set so far, then SAFE (and include); writes are checked.
local function sandbox(values, dir, depth, included)
  local function include(path)
    if type(path) ~= "string" then error("include: a path expected", 2) end
    if depth >= 8 then error("include: nested too deep (a cycle?)", 2) end
    local full = paths.absolute(path, dir)
    local f, why = io.open(full, "rb")
    if not f then error("include: cannot read " .. why, 2) end   -- at the including line
    f:close()
    included[#included + 1] = { path = path, full = full }
    load_into(full, values, depth + 1, included)
  end
  local function recorded_require(name)   -- SAFE's require, the name kept for the nodes (config.modules)
    local requires = MODULES[values].requires
    if type(name) == "string" and not requires[name] then requires[name], requires[#requires + 1] = true, name end
    return require(name)
  end
  return setmetatable({}, {
    __index = function(_, k)
      if values[k] ~= nil then return values[k] end
      if k == "require" then return recorded_require end
      if SAFE[k] ~= nil then return SAFE[k] end
      if k == "include" then return include end
      local rule = M.SCHEMA[k]
      if rule then   -- a key not set yet: its default is filled in after the config has run
        local d = rule.default
        error(string.format("config key '%s' is read before the config set it: a key reads as a variable once set "
                            .. "(%s)", k, (type(d) == "number" or type(d) == "string" or type(d) == "boolean")
                                and string.format("its default, %s, comes after the config has run", tostring(d))
                                or "a default comes after the config has run"), 2)
      end
      local names = {}   -- the nearest name it may have meant: one set, a config key, a library
      for _, t in ipairs { values, SAFE, M.SCHEMA } do
        for n in pairs(t) do names[#names + 1] = n end
      end
      error(string.format("undefined variable '%s'%s", tostring(k), options.suggest(k, names)), 2)
    end,
    __newindex = function(_, k, v)
      local err, resolved = M.check(k, v, dir)
      if err then error(err, 2) end
      values[k] = resolved
      local at, where = debug.getinfo(2, "Sl"), WHERE[values]
      if where then where[k] = at and at.currentline > 0 and at.short_src .. ":" .. at.currentline or nil end
    end,
  })
end

-- What KEY=nil parses to: the key unset, back to its default (as if the config never set it)
M.UNSET = setmetatable({}, { __tostring = function() return "nil" end })

--- Parses "KEY=VALUE" (VALUE as a Lua expression, else as a string; nil: config.UNSET) -> key, value | nil, err
function M.parse_override(arg)
  local key, text = arg:match("^([%a_][%w_]*)=(.*)$")
  if not key then return nil, string.format("'%s' is not KEY=VALUE", arg) end
  if text:match("^%s*nil%s*$") then return key, M.UNSET end
  local chunk, syntax = load("return " .. text, "=override", "t", {})
  if not chunk and text:match("^%s*[{\"']") then   -- meant as a table or a quoted string
    return nil, string.format("%s: not a Lua value (%s)", arg, syntax:gsub("^override:%d+: ", ""))
  end
  local ok, value = false, nil
  if chunk then
    local got = table.pack(pcall(chunk))
    ok, value = got[1], got[2]
    if ok and value ~= nil and got.n > 2 then   -- nodes=4,8 ran 4 nodes without a word
      return nil, string.format("%s: %d values; give one (a list: %s={%s})", arg, got.n - 1, key, text)
    end
  end
  if not ok or value == nil then value = text end
  return key, value
end

-- Runs the config file at path into values (include() runs another one, relative to it).
function load_into(path, values, depth, included)
  local f, err = io.open(path, "rb")
  if not f then error(string.format("cannot read config: %s", err), 0) end
  local source = f:read("a")
  f:close()
  local dir = paths.absolute(paths.dirname(path))
  config_modules.add(dir)
  local dirs = MODULES[values].dirs
  if not dirs[dir] then dirs[dir], dirs[#dirs + 1] = true, dir end
  local chunk, lerr = load(source, "@" .. path, "t", sandbox(values, dir, depth, included))
  if not chunk then error(lerr, 0) end
  local ok, result = pcall(chunk)
  if not ok then error(result, 0) end
  if type(result) == "table" then   -- `return { ... }` configs are checked key by key
    for k, v in pairs(result) do
      local e, resolved = M.check(k, v, dir)
      if e then error(string.format("%s: %s", path, e), 0) end
      values[k] = resolved
    end
  end
  return source
end

--- config.files(cfg, path, included) -> every file the config at path uses: included (what
-- config.load returned: the configs it included), then its component files, path options naming
-- files and the modules it required from its directory, once each ({ path, full }: path relative
-- to the config's directory when the file lies under it, else absolute). Only the launcher needs
-- this list (the run directory keeps the files, dispatch uploads them); nodes never ask for it.
function M.files(values, path, included)
  local files, dir = { table.unpack(included or {}) }, paths.absolute(paths.dirname(path))
  local used = {}
  for k, v in pairs(values) do M.check(k, v, dir, used) end
  local function under(p) return p:sub(1, #dir + 1) == dir .. "/" end
  for _, p in ipairs(config_modules.required()) do
    if under(p) then used[#used + 1] = p end   -- another config's modules are not this one's
  end
  table.sort(used)
  local seen = {}
  for _, f in ipairs(files) do seen[f.full] = true end
  for _, full in ipairs(used) do
    if not seen[full] then
      seen[full] = true
      files[#files + 1] = { path = under(full) and full:sub(#dir + 2) or full, full = full }
    end
  end
  return files
end

--- Loads path and applies the overrides (a list of "KEY=VALUE"); returns the config with every
-- default filled in, its source, and the configs it included ({ {path = as written, full}, ... });
-- raises with file and line. opts.either_kind: keys of the other kind of run are let through (a
-- node's own load: the launcher checked them; the repl makes a centralized config one node).
function M.load(path, overrides, opts)
  local values, included = {}, {}
  local where = {}
  WHERE[values], MODULES[values] = where, { dirs = {}, requires = {} }
  local source = load_into(path, values, 0, included)
  for _, o in ipairs(overrides or {}) do
    local key, value = M.parse_override(o)
    if not key then error("command line: " .. value, 0) end
    if value == M.UNSET then
      if not M.SCHEMA[key] then error(string.format("command line: %s: %s", o, M.check(key)), 0) end
      values[key] = nil
    else
      local e, resolved = M.check(key, value)   -- paths on the command line: from the current directory
      if e then error(string.format("command line: %s: %s", o, e), 0) end
      values[key] = resolved
    end
    where[key] = "command line: " .. o
  end
  -- a key of the other kind of run would be ignored without a word (a run directory's effective
  -- config written before this check held such keys, which that run ignored: they are dropped)
  local decentralized = values.nodes ~= nil
  local effective = path:match("/config%.effective%.lua$") or path == "config.effective.lua"
  EFFECTIVE[values] = effective and true or nil
  local function other(k)
    local mode = M.SCHEMA[k] and M.SCHEMA[k].mode
    return mode and (mode == "decentralized") ~= decentralized and mode
  end
  local wrong = {}
  for k in pairs(values) do
    if not (opts and opts.either_kind) and other(k) then
      if effective then values[k] = nil else wrong[#wrong + 1] = k end
    end
  end
  if #wrong > 0 then   -- the first one set, in line order (the command line's last)
    local function line(k) return tonumber((where[k] or ""):match(":(%d+)$")) or math.huge end
    table.sort(wrong, function(a, b) return line(a) < line(b) or line(a) == line(b) and a < b end)
    local k = wrong[1]
    error(string.format("%s: config key '%s' is for %s runs; this one is %s", where[k] or path, k, other(k),
                        decentralized and "decentralized (nodes is set): its nodes train local_steps or "
                                          .. "local_epochs a round, for rounds rounds"
                                      or "centralized (no nodes): it trains epochs or max_steps"), 0)
  end
  local set = {}
  for k in pairs(values) do set[k] = true end
  SET[values] = set
  for k, s in pairs(M.SCHEMA) do
    if values[k] == nil and not other(k) then values[k] = s.default end
  end
  values.name = values.name or path:match("([^/]+)%.lua$") or path
  return values, source, included
end

--- config.warnings(cfg) -> the lines (a list) of settings another key overrides or makes moot, each
-- naming both keys, where each was set, and the one that wins: positive_classes with a multiclass
-- task, local_steps beside local_epochs, churn's leave_rounds at or past rounds. Not refused: a
-- config that includes another may well set both. None for a run directory's record (it holds
-- every key; its run said so).
function M.warnings(cfg)
  local set, where = SET[cfg], WHERE[cfg] or {}
  if not set or M.is_effective(cfg) then return {} end
  -- "k = value (file:line)"; value nil: "k (file:line)"
  local function key(k, value, name)
    local at = where[k] and " (" .. where[k] .. ")" or (set[k] and "" or " (the default)")
    return (name or k) .. (value ~= nil and " = " .. tostring(value) or "") .. at
  end
  local lines = {}
  if set.positive_classes and cfg.task ~= "binary" then
    lines[#lines + 1] = string.format("%s is ignored: %s wins (it trains on every class; positive_classes applies "
                                      .. "to task = 'binary')", key("positive_classes"),
                                      key("task", "'" .. tostring(cfg.task) .. "'"))
  end
  if set.local_steps and cfg.local_epochs then
    lines[#lines + 1] = string.format("%s is ignored: %s wins (each round trains that many passes over the node's "
                                      .. "shard)", key("local_steps", cfg.local_steps),
                                      key("local_epochs", cfg.local_epochs))
  end
  local leave = type(cfg.churn) == "table" and cfg.churn.leave_rounds
  if leave and cfg.rounds and leave >= cfg.rounds then
    lines[#lines + 1] = string.format("churn's %s is at or past %s: rounds wins (the nodes that leave are absent "
                                      .. "from round 1 to the end)", key("churn", leave, "leave_rounds"),
                                      key("rounds", cfg.rounds))
  end
  return lines
end

--- config.where(cfg, key) -> where cfg's key was last set ("file:line", or "command line: KEY=VALUE"), or nil
-- (a default, or a table config.load did not make)
function M.where(cfg, key) return (WHERE[cfg] or {})[key] end

--- config.copy(cfg) -> a shallow copy of cfg (a dispatch job's) that config.where, config.warnings and
-- config.is_effective answer for as for cfg
function M.copy(cfg)
  local copy = {}
  for k, v in pairs(cfg) do copy[k] = v end
  WHERE[copy], SET[copy], EFFECTIVE[copy], MODULES[copy] = WHERE[cfg], SET[cfg], EFFECTIVE[cfg], MODULES[cfg]
  return copy
end

--- config.modules(cfg) -> { dirs = the directories of the files cfg was loaded from, requires =
-- the modules those files required }, each in order: a node that reads back the launcher's values
-- looks for the config's own modules there (dpy.config_modules) and requires the same, so that
-- what they register is there as when the config ran; empty for a table config.load did not make
function M.modules(cfg)
  local m = MODULES[cfg] or { dirs = {}, requires = {} }
  return { dirs = { table.unpack(m.dirs) }, requires = { table.unpack(m.requires) } }
end

--- Whether cfg was loaded from a run directory's config.effective.lua (a rerun or --resume): it
-- runs as it ran, keys a later version refuses included.
function M.is_effective(cfg) return EFFECTIVE[cfg] == true end

return M
