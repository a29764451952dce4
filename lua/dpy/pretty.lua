--- dpy.pretty: how the REPL shows values: tensors and modules through their __tostring, tables
-- one level deep (sorted keys, at most 20 entries), strings quoted.
local M = {}

local MAX = 20

local function scalar(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

--- pretty.uids(list) -> "node 3", or "nodes 0-3, 7, 9-10" (sorted, consecutive ones as a range)
function M.uids(list)
  local u = { table.unpack(list) }
  table.sort(u)
  local parts, i = {}, 1
  while i <= #u do
    local j = i
    while j < #u and u[j + 1] == u[j] + 1 do j = j + 1 end
    parts[#parts + 1] = j > i and string.format("%d-%d", u[i], u[j]) or tostring(u[i])
    i = j + 1
  end
  return (#u == 1 and "node " or "nodes ") .. table.concat(parts, ", ")
end

-- Inside a table, a value shown on several lines (a tensor) keeps its first line, and the second
-- when that is all: the table stays on one line.
local function inline(text)
  local first, rest = text:match("^([^\n]*)\n(.*)$")
  if not first then return text end
  return first .. (rest:find("\n", 1, true) and " ..." or " " .. rest)
end

--- pretty.format(v [, depth = 2]) -> string; a table's own entries (rawlen: not what its __len says)
function M.format(v, depth)
  depth = depth or 2
  if type(v) ~= "table" or getmetatable(v) and getmetatable(v).__tostring then return scalar(v) end
  if depth == 0 then return "{...}" end
  local keys, n = {}, rawlen(v)
  for k in pairs(v) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for i = 1, math.min(n, MAX) do parts[#parts + 1] = inline(M.format(rawget(v, i), depth - 1)) end
  for _, k in ipairs(keys) do
    if #parts >= MAX then break end
    local key = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or "[" .. scalar(k) .. "]"
    parts[#parts + 1] = key .. " = " .. inline(M.format(rawget(v, k), depth - 1))
  end
  if n + #keys > MAX then parts[#parts + 1] = "..." end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

--- pretty.line(...) -> each value formatted, tab-separated
function M.line(...)
  local out = {}
  for i = 1, select("#", ...) do out[i] = M.format((select(i, ...))) end
  return table.concat(out, "\t")
end

--- pretty.print(...): pretty.line(...) on stdout
function M.print(...)
  io.stdout:write(M.line(...), "\n")
end

return M
