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
local host = require "dpy.host.core"

local M = {}

--- Where the built-ins of each kind live: a folder of lua/dpy holding one file per component,
-- and/or a module registering a family of them.
M.KINDS = {
  action = { folder = "actions" }, algorithm = { folder = "algorithms" },
  dataset = { folder = "datasets" }, model = { folder = "models" },
  optimizer = { module = "dpy.optim" }, sharing = { folder = "sharing", module = "dpy.sharing.robust" },
  aggregator = { module = "dpy.aggregators" }, attack = { module = "dpy.byzantine.attacks" },
  graph = { folder = "graphs" }, partitioner = { module = "dpy.partitioners" },
  transform = { folder = "transforms" },
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
  local path = host.module_file("dpy.registry")
  return path and path:match("^(.*)/registry%.lua$")
end

local looked_up = {}   -- kind -> name -> true once loaded by name (a node asks often)

-- A built-in module registers as it loads, as itself: while a user's file that asks for it is
-- loaded (not as that file's spec), and with the registry frozen (the freeze keeps a node's
-- components fixed after init; a built-in asked for later, a chain of transforms an action builds,
-- changes none of them).
local function require_builtin(name)
  local loading = capture
  if loading then loading.depth = loading.depth + 1 end
  local ok, module
  if frozen then ok, module = pcall(M.thawed, require, name) else ok, module = pcall(require, name) end
  if loading then loading.depth = loading.depth - 1 end
  if not ok then error(module, 0) end
  return module
end

-- Loads the built-ins of kind: for one name, its file in the kind's folder, else the kind's module
-- (which registers a family: sharing's robust rules); without a name, the module and every file
-- of the folder. A name found by its file or the module lists no folder, so a node's start-up
-- reads no directory.
local function load_builtins(kind, name)
  local home = M.KINDS[kind]
  local module = home.folder and "dpy." .. home.folder .. "."
  if module and name and not loaded_kinds[kind] then
    local seen = looked_up[kind] or {}
    looked_up[kind] = seen
    if seen[name] then return end
    if type(name) == "string" and name:match("^[%w_]+$") and host.module_file(module .. name) then
      require_builtin(module .. name)
    elseif home.module then
      require_builtin(home.module)
    end
    seen[name] = true   -- once its file or the module loaded: one that raised raises again
    return
  end
  if home.module then require_builtin(home.module) end
  if not home.folder or loaded_kinds[kind] then return end
  local _, files = require("dpy.data.core").list_dir(assert(dpy_dir()) .. "/" .. home.folder)
  for _, file in ipairs(files or {}) do
    local base = file:match("^([%w_]+)%.lua$")
    if base then require_builtin(module .. base) end
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
    local others = {}   -- what it registered instead: the kind the file is of, most likely
    for _, s in ipairs(mine.specs) do
      if s.kind ~= kind then others[#others + 1] = string.format("%s '%s'", s.kind, tostring(s.name)) end
    end
    local got = #of_kind == 0 and (#others > 0 and "none of that kind, but " .. table.concat(others, ", ") or "none")
                or tostring(#of_kind)
    return nil, string.format("%s: %s %s file must register one spec of kind '%s' and return it "
                              .. "(return registry.register { kind = \"%s\", name = ..., new = ... }); "
                              .. "it registered %s", path, kind:match("^[aeiou]") and "an" or "a", kind, kind,
                              kind, got)
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
    local rule = schema[k]
    if k ~= 1 then resolved[k] = options.normalize(v, rule) end
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

--- Builds a component from its config entry; ctx carries what it needs (a dataset, a model, the
-- node). new gets the entry's options with the defaults of the spec's schema filled in; what a
-- user's file returns is checked against its kind's contract (dpy.contracts).
function M.build(kind, entry, ctx, base)
  local spec, cfg = M.options(kind, entry, 2, base)
  ctx = ctx or {}
  local built = spec.new(cfg, ctx)
  local check = spec.path and require("dpy.contracts")[kind]
  local wrong = check and check(built, ctx, spec)
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
