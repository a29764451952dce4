--- dpy.help: what the REPL tells of a value: help(x) lists a module's functions or a userdata's
-- methods, and complete(text) the names Tab may complete text with.
local M = {}

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
                   "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while" }

-- The methods of a userdata or object: its metatable's __index table, or the table a C __index
-- function looks names up in (its first upvalue).
local function methods(v)
  local mt = getmetatable(v)
  if type(mt) ~= "table" then return nil, type(mt) == "string" and mt or nil end
  local index = mt.__index
  if type(index) == "function" then
    local _, up = debug.getupvalue(index, 1)
    index = up
  end
  return type(index) == "table" and index or nil, mt.__name
end

-- The names v offers after "." (fields) and ":" (methods), sorted.
local function names(v, colon)
  local out, seen = {}, {}
  local function add(t, only_functions)
    if type(t) ~= "table" then return end
    for k, x in pairs(t) do
      if type(k) == "string" and not seen[k] and (not only_functions or type(x) == "function")
         and not k:match("^__") then
        seen[k] = true
        out[#out + 1] = k
      end
    end
  end
  if type(v) == "table" and not colon then add(v) end
  add((methods(v)), colon)
  if type(v) == "table" and colon then add(v, true) end
  table.sort(out)
  return out
end

--- help([x]): prints what x offers (nothing: how to use the prompt).
function M.help(...)
  if select("#", ...) == 0 then
    print("dpy, tensor, nn, optim and data are bound (with a config, node too). help(x) lists x's functions or"
          .. " methods; Tab completes names, fields and methods; the README's Lua API section documents each.")
    return
  end
  local x = ...
  local list, name = methods(x)
  if type(x) == "table" then
    local fields = {}
    for _, k in ipairs(names(x)) do
      local v = x[k]
      -- an object's functions (a dpy.Node's, named by its locked metatable) are its methods
      fields[#fields + 1] = type(v) == "function" and (name and ":" or "") .. k .. "()"
                            or string.format("%s (%s)", k, type(v))
    end
    print(string.format("%s: %s", name or "table", table.concat(fields, ", ")))
  elseif list then
    local ms = {}
    for _, k in ipairs(names(x, true)) do ms[#ms + 1] = ":" .. k .. "()" end
    print(string.format("%s: %s", name or type(x), table.concat(ms, ", ")))
  else
    print(string.format("a %s%s", type(x), name and " (" .. name .. ")" or ""))
  end
end

--- complete(text [, env, globals]) -> the words Tab may put for text: globals and keywords, or
-- after `a.b.` / `a.b:` the fields or methods of a.b (looked up in env, default _G, never called).
-- globals: the tables whose keys are the global names (default { env }).
function M.complete(text, env, globals)
  env = env or _G
  local prefix, sep, partial = text:match("^(.-)([.:])([%w_]*)$")
  local pool, head
  if prefix then
    if not prefix:match("^[%a_][%w_]*[%w_.]*$") then return {} end
    local v = env
    for part in prefix:gmatch("[^.]+") do
      local ok, nv = pcall(function() return v[part] end)
      if not ok or nv == nil then return {} end
      v = nv
    end
    pool, head = names(v, sep == ":"), prefix .. sep
  else
    partial, head = text, ""
    pool = {}
    local seen = {}
    for _, t in ipairs(globals or { env }) do
      for _, k in ipairs(names(t)) do
        if not seen[k] then seen[k] = true; pool[#pool + 1] = k end
      end
    end
    for _, k in ipairs(KEYWORDS) do pool[#pool + 1] = k end
  end
  local out = {}
  for _, k in ipairs(pool) do
    if k:sub(1, #partial) == partial then out[#out + 1] = head .. k end
  end
  table.sort(out)
  return out
end

return M
