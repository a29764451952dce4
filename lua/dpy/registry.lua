--- dpy.registry: named factories for every pluggable component, one registry per Lua state.
-- A spec is { kind, name, new = function(cfg, ctx), doc = string, options = schema (see
-- dpy.options), validate = function(cfg) -> nil | message (checks across options) }.
-- Configs name a component by string or by the path of a Lua file: "cnn", { "sgd", lr = 0.05 },
-- "models/resnet8.lua", { "rules/clipped.lua", radius = 2 }. A built-in lives in the folder of its
-- kind (lua/dpy/models/cnn.lua) or in its kind's module; a user's file follows the same contract:
-- it returns registry.register { kind = ..., name = ..., new = ... }, and its options are checked
-- the same way. new(cfg, ctx) gets the options with their defaults filled in.
local options = require "dpy.options"
local paths = require "dpy.paths"

local M = {}

--- Where the built-ins of each kind live: a folder of lua/dpy holding one file per component,
-- and/or a module registering a family of them.
M.KINDS = {
  action = { folder = "actions" }, algorithm = { folder = "algorithms" },
  dataset = { folder = "datasets" }, model = { folder = "models" },
  optimizer = { module = "dpy.optim" }, sharing = { folder = "sharing", module = "dpy.sharing.robust" },
  aggregator = { module = "dpy.aggregators" }, attack = { module = "dpy.byzantine.attacks" },
  graph = { module = "dpy.graph" }, partitioner = { module = "dpy.partitioners" },
  transform = { module = "dpy.transforms" },
}

local specs, frozen = {}, false
local loaded_kinds = {}
local by_path = {}     -- absolute path -> spec of a user's component file
local capture          -- while a user's file runs: { specs = what it registered, depth = requires under way }

--- Registers a factory; raises on misuse; returns the spec.
function M.register(spec)
  if frozen then error("dpy.registry: frozen after init", 2) end
  if type(spec) ~= "table" or not M.KINDS[spec.kind] then
    local kinds = {}
    for k in pairs(M.KINDS) do kinds[#kinds + 1] = k end
    table.sort(kinds)
    error(string.format("dpy.registry: unknown kind %q%s; kinds: %s", tostring(spec and spec.kind),
                        options.suggest(spec and spec.kind, M.KINDS), table.concat(kinds, ", ")), 2)
  end
  if type(spec.name) ~= "string" or type(spec.new) ~= "function" then
    error("dpy.registry: a spec needs a string 'name' and a function 'new'", 2)
  end
  if spec.options ~= nil and type(spec.options) ~= "table" then
    error(string.format("dpy.registry: %s '%s': options must be a table (key -> rule)", spec.kind, spec.name), 2)
  end
  if capture and capture.depth == 0 then
    -- a user's file: known by its path, never by name, so it shadows nothing (the modules it
    -- requires register as they always do)
    capture.specs[#capture.specs + 1] = spec
    return spec
  end
  local by_name = specs[spec.kind] or {}
  specs[spec.kind] = by_name
  if by_name[spec.name] then
    error(string.format("dpy.registry: %s %q registered twice", spec.kind, spec.name), 2)
  end
  by_name[spec.name] = spec
  return spec
end

-- The directory holding lua/dpy (where the built-in folders are).
local function dpy_dir()
  local path = package.searchpath("dpy.registry", package.path)
  return path and path:match("^(.*)/registry%.lua$")
end

-- Loads the built-ins of kind: for one name, its file in the kind's folder, else the kind's module
-- (which registers a family: sharing's robust rules); without a name, the module and every file
-- of the folder. A name found by its file or the module lists no folder, so a node's start-up
-- reads no directory.
local function load_builtins(kind, name)
  local home = M.KINDS[kind]
  local module = home.folder and "dpy." .. home.folder .. "."
  if module and name and not loaded_kinds[kind] then
    if type(name) == "string" and name:match("^[%w_]+$") and package.searchpath(module .. name, package.path) then
      require(module .. name)
    elseif home.module then
      require(home.module)
    end
    return
  end
  if home.module then require(home.module) end
  if not home.folder or loaded_kinds[kind] then return end
  local _, files = require("dpy.data.core").list_dir(assert(dpy_dir()) .. "/" .. home.folder)
  for _, file in ipairs(files or {}) do
    local base = file:match("^([%w_]+)%.lua$")
    if base then require(module .. base) end
  end
  loaded_kinds[kind] = true
end

--- Whether a component reference names a file (it ends in .lua) rather than a built-in.
function M.is_path(ref)
  return type(ref) == "string" and ref:match("%.lua$") ~= nil
end

-- The spec a user's file registers, loaded once per state; nil and a message when it fails.
local function load_file(kind, path)
  local known = by_path[path]
  if known and known.kind ~= kind then
    return nil, string.format("%s registers %s %s ('%s'), not %s %s", path,
                              known.kind:match("^[aeiou]") and "an" or "a", known.kind, known.name,
                              kind:match("^[aeiou]") and "an" or "a", kind)
  end
  if known then return known end
  local mine = { specs = {}, depth = 0 }
  -- registrations made by the modules the file requires are theirs, made as usual
  local function counted_require(name)
    mine.depth = mine.depth + 1
    local ok, module, where = pcall(require, name)
    mine.depth = mine.depth - 1
    if not ok then error(module, 2) end
    return module, where
  end
  local chunk, err = loadfile(path, "t", setmetatable({ require = counted_require }, { __index = _G }))
  if not chunk then
    return nil, (err:gsub("^cannot open ", "cannot read " .. kind .. " file "))
  end
  local saved = capture
  capture = mine
  local ok, result = pcall(chunk)
  capture = saved
  if not ok then return nil, tostring(result) end
  local of_kind = {}
  for _, s in ipairs(mine.specs) do if s.kind == kind then of_kind[#of_kind + 1] = s end end
  if #of_kind ~= 1 or (result ~= nil and result ~= of_kind[1]) then
    return nil, string.format("%s: %s %s file must register one spec of kind '%s' and return it "
                              .. "(return registry.register { kind = \"%s\", name = ..., new = ... }); "
                              .. "it registered %d", path, kind:match("^[aeiou]") and "an" or "a", kind, kind,
                              kind, #of_kind)
  end
  of_kind[1].path = path
  by_path[path] = of_kind[1]
  return of_kind[1]
end

local is_file = paths.is_file

--- The spec of a config entry ("name", "file.lua", or { name or file, options... }), or nil and
-- a message that names the nearest valid name for a misspelt one, or the bad option. A relative
-- file is found from base (the config's directory). Returns the spec and the entry, its file
-- and its path options made absolute (a copy when anything changed). used, when given, receives
-- the absolute path of every file the entry names (its component file, path options naming files).
function M.check(kind, entry, base, used)
  local name = type(entry) == "table" and entry[1] or entry
  if type(name) ~= "string" then
    return nil, string.format("a %s name or { name, options... } expected, got %s", kind,
                              type(entry) == "table" and "a table without a name" or type(entry))
  end
  if not M.KINDS[kind] then error(string.format("dpy.registry: unknown kind %q", tostring(kind)), 2) end
  local spec, err
  if M.is_path(name) then
    name = paths.absolute(name, base)
    spec, err = load_file(kind, name)
    if not spec then return nil, err end
    if used then used[#used + 1] = name end
  else
    load_builtins(kind, name)
    spec = (specs[kind] or {})[name]
    if not spec then   -- a file of the folder may register several
      load_builtins(kind)
      spec = (specs[kind] or {})[name]
    end
    if not spec then
      local names = M.list(kind)
      return nil, string.format("no %s named '%s'%s; valid: %s, or the path of a Lua file", kind, name,
                                options.suggest(name, names), table.concat(names, ", "))
    end
  end
  local opts = type(entry) == "table" and entry or {}
  local what = string.format("%s '%s'", kind, spec.name)
  local schema = spec.options or {}
  err = options.problem(opts, schema, what)
  if err then return nil, err end
  local resolved = { name }
  for k, v in pairs(opts) do
    if k ~= 1 then resolved[k] = v end
    local rule = schema[k]
    if type(rule) == "table" then
      if rule.type == "path" then
        resolved[k] = paths.absolute(v, base)
        local file = is_file(resolved[k])
        if rule.exists == "file" and not file then
          return nil, string.format("%s: option '%s': no readable file %s", what, k, resolved[k])
        end
        if used and file then used[#used + 1] = resolved[k] end
      elseif rule.kind then
        local _, e, sub = M.check(rule.kind, v, base, used)
        if e then return nil, string.format("%s: option '%s': %s", what, k, e) end
        resolved[k] = sub
      elseif rule.list_of then
        local list = {}
        for i, item in ipairs(v) do
          local _, e, sub = M.check(rule.list_of, item, base, used)
          if e then return nil, string.format("%s: option '%s'[%d]: %s", what, k, i, e) end
          list[i] = sub
        end
        resolved[k] = list
      end
    end
  end
  local bad = spec.validate and spec.validate(options.with_defaults(resolved, schema))
  if bad then return nil, string.format("%s: %s", what, bad) end
  if type(entry) ~= "table" then return spec, nil, name end
  return spec, nil, resolved
end

--- The spec of a config entry; raises (at the caller's level) when M.check finds none.
function M.spec(kind, entry, level, base)
  local spec, err = M.check(kind, entry, base)
  if not spec then error(err, (level or 1) + 1) end
  return spec
end

--- The spec of a config entry and the entry's options with the defaults of the spec's schema
-- filled in (what its new gets); raises (at the caller's level) when M.check finds no spec.
function M.options(kind, entry, level, base)
  local spec, err, resolved = M.check(kind, entry, base)
  if not spec then error(err, (level or 1) + 1) end
  return spec, options.with_defaults(type(resolved) == "table" and resolved or {}, spec.options or {})
end

-- What is wrong with graph g for a run of nodes nodes (nil: nothing): every node takes its own
-- list as the peers that send to it, so a one-way link leaves a node waiting out peer_timeout.
local function graph_problem(g, nodes)
  if type(g) ~= "table" or type(g.adj) ~= "table" then
    return "must return { n = nodes, adj = { [uid] = neighbour uids } }, got " .. type(g)
  end
  if g.n ~= nodes then return string.format("returned a graph of n = %s for %d nodes", tostring(g.n), nodes) end
  local listed = {}
  for u = 0, nodes - 1 do
    if type(g.adj[u]) ~= "table" then return "returned no neighbour list for node " .. u end
    listed[u] = {}
    for _, v in ipairs(g.adj[u]) do
      local why = (math.type(v) ~= "integer" or v < 0 or v >= nodes)
                  and string.format("%s, not a node (an integer 0..%d)", tostring(v), nodes - 1)
                  or v == u and "itself (a self-loop)" or listed[u][v] and v .. " twice"
      if why then return string.format("returned a graph whose node %d lists %s", u, why) end
      listed[u][v] = true
    end
  end
  for u = 0, nodes - 1 do
    for _, v in ipairs(g.adj[u]) do
      if not listed[v][u] then
        return string.format("returned a directed graph: node %d lists %d as a neighbour, but %d does not list %d",
                             u, v, v, u)
      end
    end
  end
end

-- What is wrong with part p of a partition of size samples (nil: nothing); layout.write packs the
-- parts into one int64 tensor, and a node's loader indexes the training set by its part.
local function part_problem(p, size)
  local tensor = require "dpy.tensor"
  if not tensor.is_tensor(p) then return "is a " .. type(p) .. ", not a tensor of sample indices" end
  if not p:dtype():match("^u?int%d+$") then return "is a tensor of " .. p:dtype() .. ", not of an integer type" end
  if p:dim() ~= 1 then return string.format("is a tensor of %d dimensions, not 1", p:dim()) end
  if not size or p:numel() == 0 then return nil end
  local lo, hi = p:min():item(), p:max():item()
  if lo < 0 or hi >= size then
    return string.format("holds index %d, outside the training set's %d samples (0..%d)", lo < 0 and lo or hi, size,
                         size - 1)
  end
end

-- The functions a sharing rule's table may hold: the runtime calls each one it finds.
local RULE_FUNCTIONS = { "combine", "exchange", "bound", "encode", "decode", "checkpoint", "restore" }

-- What is wrong with a sharing rule (nil: nothing): dpsgd calls its exchange when it has one, else
-- its combine; a payload of its own needs all three of bound, encode and decode.
local function rule_problem(rule, spec)
  if type(rule) ~= "table" then return "must return a table holding the rule's functions, got " .. type(rule) end
  for _, name in ipairs(RULE_FUNCTIONS) do
    if rule[name] ~= nil and type(rule[name]) ~= "function" then
      return string.format("returned %s, a %s, not a function", name, type(rule[name]))
    end
  end
  if spec.exchange and not rule.exchange then
    return "returned no exchange (a function(node, round, graph, live_neighbours)), which exchange = true in its "
           .. "spec promises"
  end
  if rule.exchange and not spec.exchange then
    return "returned exchange, but its spec does not say exchange = true (then sim_clock, churn and round_timeout, "
           .. "which its messages do not follow, are refused)"
  end
  if not rule.exchange and not rule.combine then
    return "returned no combine (a function(node, round, got, weights, own_weight))"
  end
  if rule.payload == nil and not rule.encode and not rule.decode then return nil end
  if type(rule.payload) ~= "string" then return "returned encode or decode without payload (its dtype, \"uint8\")" end
  for _, name in ipairs { "bound", "encode", "decode" } do
    if not rule[name] then return string.format("returned a payload of its own without %s (a function)", name) end
  end
end

-- What a user's new of these kinds must return, checked where the code that uses it would
-- otherwise fail far from the cause (a table for a model, more labels than images, a one-way
-- link, a part past the training set, a rule without combine): nil, or what is wrong. The
-- built-ins check their own data; every node builds its datasets and its sharing rule, and
-- layout.check builds the graph and the partition before anything is written.
local RESULTS = {
  graph = function(g, ctx) return graph_problem(g, ctx.nodes) end,
  partitioner = function(parts, ctx)
    if type(parts) ~= "table" then return "must return a list of tensors of sample indices, got " .. type(parts) end
    if #parts ~= ctx.nodes then return string.format("returned %d parts for %d nodes", #parts, ctx.nodes) end
    local labels = ctx.labels
    local size = require("dpy.tensor").is_tensor(labels) and labels:size(0) or labels and #labels
    for k, p in ipairs(parts) do
      local wrong = part_problem(p, size)
      if wrong then return string.format("returned part %d that %s", k, wrong) end
    end
  end,
  sharing = function(rule, _, spec) return rule_problem(rule, spec) end,
  model = function(m)
    if not require("dpy.nn").is_module(m) then return "must return a dpy.Module, got " .. type(m) end
  end,
  dataset = function(d)
    if type(d) ~= "table" then return "must return a table, got " .. type(d) end
    local tensor = require "dpy.tensor"
    if not (tensor.is_tensor(d.images) and d.images:dim() >= 2) then
      return "must return images, a tensor N x ... (one image a row)"
    end
    local n, labels = d.images:size(0), d.labels
    if not (tensor.is_tensor(labels) and labels:dim() == 1) then return "must return labels, a tensor of N labels" end
    if labels:numel() ~= n then return string.format("returned %d labels for %d images", labels:numel(), n) end
    local dtype = labels:dtype()   -- the loader widens any integer type to int64
    if not dtype:match("^u?int%d+$") then return "returned labels of " .. dtype .. ", not of an integer type" end
    if math.type(d.classes) ~= "integer" or d.classes < 1 then return "must return classes, an integer >= 1" end
    local lo, hi = n > 0 and labels:min():item() or 0, n > 0 and labels:max():item() or 0
    if lo < 0 or hi >= d.classes then
      return string.format("returned labels from %d to %d for %d classes (0 to %d)", lo, hi, d.classes, d.classes - 1)
    end
  end,
}

--- Builds a component from its config entry; ctx carries what it needs (a dataset, a model, the
-- node). new gets the entry's options with the defaults of the spec's schema filled in.
function M.build(kind, entry, ctx, base)
  local spec, cfg = M.options(kind, entry, 2, base)
  ctx = ctx or {}
  local built = spec.new(cfg, ctx)
  local wrong = spec.path and RESULTS[kind] and RESULTS[kind](built, ctx, spec)
  if wrong then
    error(string.format("%s '%s'%s: new %s", kind, spec.name, spec.path and " (" .. spec.path .. ")" or "", wrong), 0)
  end
  return built
end

--- The sorted names of the built-ins of kind (and any a config registered).
function M.list(kind)
  load_builtins(kind)
  local names = {}
  for name in pairs(specs[kind] or {}) do names[#names + 1] = name end
  table.sort(names)
  return names
end

--- registry.freeze(): after init nothing can be registered (or loaded from a file).
function M.freeze() frozen = true end

--- registry.thawed(fn, ...) -> fn's results: fn run with registering allowed again, then the
-- registry as it was (dpy-lua attach's add_action: a component loaded on purpose into a running node).
function M.thawed(fn, ...)
  local was = frozen
  frozen = false
  local res = table.pack(pcall(fn, ...))
  frozen = was
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

return M
