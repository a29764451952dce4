--- dpy.serialize: plain Lua values (nil, booleans, numbers, strings, tables of those) written as
-- Lua source that reads back to an equal value: integers stay integers, floats come back
-- bit for bit, and keys come in a stable order (the list part, then numbers, then strings), so
-- the same value always gives the same text. Every value fits on one line.
local M = {}

local RESERVED = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or repeat
            return then true until while]]):gmatch("%a+") do
  RESERVED[w] = true
end

local function float(x)
  if x ~= x then return "0/0" end
  if x == math.huge then return "1/0" end
  if x == -math.huge then return "-1/0" end
  local s, digits
  for d = 1, 17 do   -- the fewest significant digits that read back to the same double
    s, digits = string.format("%." .. (d - 1) .. "e", x), d
    if tonumber(s) == x then break end
  end
  local exp = tonumber(s:match("e([-+]%d+)$"))
  if exp >= -4 and exp < 16 then   -- positional below 1e16, as Python's repr
    s = string.format("%." .. math.max(digits - 1 - exp, 0) .. "f", x)
    if not s:find(".", 1, true) then s = s .. ".0" end   -- still a float when read back
  end
  return s
end

local function integer(i)
  -- -9223372036854775808 would read back as a float (the minus applies to a float literal)
  if i == math.mininteger then return "(-9223372036854775807 - 1)" end
  return string.format("%d", i)
end

local function quote(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))   -- %q continues a string on a new line
end

local function key_rank(k)
  local t = type(k)
  return t == "number" and 1 or t == "string" and 2 or 3
end

local function key_less(a, b)
  local ra, rb = key_rank(a), key_rank(b)
  if ra ~= rb then return ra < rb end
  if ra == 3 then return a == false and b == true end   -- booleans: false first
  return a < b
end

local function is_name(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") and not RESERVED[k]
end

local encode

local function key_text(k, path)
  if is_name(k) then return k end
  if type(k) == "number" and k ~= k then error(path .. ": a NaN key cannot be written", 0) end
  return "[" .. encode(k, path, {}) .. "]"
end

local function key_path(path, k)
  return is_name(k) and path .. "." .. k or string.format("%s[%s]", path, tostring(k))
end

function encode(v, path, seen)
  local t = type(v)
  if t == "nil" or t == "boolean" then return tostring(v) end
  if t == "string" then return quote(v) end
  if t == "number" then return math.type(v) == "integer" and integer(v) or float(v) end
  if t ~= "table" then error(string.format("%s: a %s cannot be written as a Lua value", path, t), 0) end
  if getmetatable(v) ~= nil then error(path .. ": a table with a metatable cannot be written as a Lua value", 0) end
  if seen[v] then error(path .. ": a table that contains itself cannot be written", 0) end
  seen[v] = true
  local parts, n = {}, 0
  while v[n + 1] ~= nil do   -- the list part, written without keys
    n = n + 1
    parts[n] = encode(v[n], string.format("%s[%d]", path, n), seen)
  end
  local keys = {}
  for k in pairs(v) do
    local kt = type(k)
    if kt ~= "number" and kt ~= "string" and kt ~= "boolean" then
      error(string.format("%s: a %s key cannot be written", path, kt), 0)
    end
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_less)
  for _, k in ipairs(keys) do
    parts[#parts + 1] = key_text(k, path) .. " = " .. encode(v[k], key_path(path, k), seen)
  end
  seen[v] = nil
  return #parts == 0 and "{}" or "{ " .. table.concat(parts, ", ") .. " }"
end

--- serialize.value(v [, what]) -> Lua source of v on one line; raises naming where (what, then
-- the keys down to it: "config.faults.drop") a value that is not plain sits.
function M.value(v, what)
  return encode(v, what or "value", {})
end

--- serialize.assignments(t [, what]) -> "key = value\n" per entry of t, keys sorted; every key
-- must be a name (as in a config file).
function M.assignments(t, what)
  what = what or "value"
  local keys, lines = {}, {}
  for k in pairs(t) do
    if not is_name(k) then error(string.format("%s: key %s is not a name", what, tostring(k)), 0) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  for i, k in ipairs(keys) do lines[i] = k .. " = " .. encode(t[k], what .. "." .. k, {}) .. "\n" end
  return table.concat(lines)
end

return M
