--- dpy.registry: named factories for every pluggable component, one registry per Lua state.
-- A spec is { kind, name, new = function(cfg, ctx), doc = string, options = {key = true, ...},
-- validate = function(cfg) -> nil | message about a bad option value (optional) }.
-- Configs name components by string: "cnn", or { "sgd", lr = 0.05 }.
local options = require "dpy.options"

local M = {}

local KINDS = { aggregator = true, sharing = true, transform = true, transport = true,
                action = true, model = true, partitioner = true, dataset = true,
                optimizer = true, graph = true }
local specs, frozen = {}, false

--- Registers a factory; raises on misuse; returns the spec.
function M.register(spec)
  if frozen then error("dpy.registry: frozen after init", 2) end
  if type(spec) ~= "table" or not KINDS[spec.kind] then
    error(string.format("dpy.registry: unknown kind %q", tostring(spec and spec.kind)), 2)
  end
  if type(spec.name) ~= "string" or type(spec.new) ~= "function" then
    error("dpy.registry: a spec needs a string 'name' and a function 'new'", 2)
  end
  local by_name = specs[spec.kind] or {}
  specs[spec.kind] = by_name
  if by_name[spec.name] then
    error(string.format("dpy.registry: %s %q registered twice", spec.kind, spec.name), 2)
  end
  by_name[spec.name] = spec
  return spec
end

--- The spec of a config entry ("name" or { "name", ... }) or nil and a message that names
-- the nearest valid name for a misspelt one, or an unknown option key.
function M.check(kind, entry)
  local name = type(entry) == "table" and entry[1] or entry
  if type(name) ~= "string" then
    return nil, string.format("a %s name or { name, options... } expected, got %s", kind,
                              type(entry) == "table" and "a table without a name" or type(entry))
  end
  local spec = (specs[kind] or {})[name]
  if not spec then
    local names = M.list(kind)
    return nil, string.format("no %s named '%s'%s; valid: %s", kind, name,
                              options.suggest(name, names), table.concat(names, ", "))
  end
  local opts = type(entry) == "table" and entry or {}
  if spec.options then
    local ok, err = pcall(options.check, opts, spec.options, kind .. " '" .. name .. "'", 0)
    if not ok then return nil, err end
  end
  local bad = spec.validate and spec.validate(opts)
  if bad then return nil, string.format("%s '%s': %s", kind, name, bad) end
  return spec
end

--- The spec of a config entry; raises (at the caller's level) when M.check finds none.
function M.spec(kind, entry, level)
  local spec, err = M.check(kind, entry)
  if not spec then error(err, (level or 1) + 1) end
  return spec
end

--- Builds a component from its config entry; ctx carries what it needs (a dataset, a model).
function M.build(kind, entry, ctx)
  local spec = M.spec(kind, entry, 2)
  return spec.new(type(entry) == "table" and entry or {}, ctx or {})
end

--- The sorted names registered for kind.
function M.list(kind)
  local names = {}
  for name in pairs(specs[kind] or {}) do names[#names + 1] = name end
  table.sort(names)
  return names
end

function M.freeze() frozen = true end

return M
