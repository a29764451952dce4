--- dpy.trace: a straggler trace file, the nodes' compute slowdowns round by round
-- (stragglers = { trace = "path" }). Two forms:
--   CSV (any name but *.json): a row per round, a column per node (uid order), numbers > 0 and
--     <= 1e9 separated by commas; blank lines and lines starting with # are skipped.
--       # round 1, 2, 3 ...
--       1, 1, 4, 1
--       1, 1, 1, 4
--   JSON (*.json): an array of such rows, [[1, 1, 4, 1], [1, 1, 1, 4]], or one row, [1, 1, 4, 1].
-- Round r uses row ((r - 1) mod rows) + 1: one row is a fixed slowdown per node, k rows repeat
-- every k rounds. A malformed file raises naming file:line.
local cjson = require("cjson").new()

local M = {}

local function number(s)
  local v = tonumber(s)
  if v and v > 0 and v <= 1e9 then return v end   -- as the config's slowdown: a node waits (v - 1) x its training
end

local function row_error(path, line, n, got)
  return string.format("%s:%d: stragglers trace: %d value(s), the config has %d nodes", path, line, got, n)
end

local function parse_csv(path, text, n)
  local rows, line = {}, 0
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    line = line + 1
    l = l:gsub("\r$", "")
    if l:match("%S") and not l:match("^%s*#") then
      local row, col = {}, 0
      for cell in (l .. ","):gmatch("([^,]*),") do
        col = col + 1
        local v = number(cell:match("^%s*(.-)%s*$"))
        if not v then
          error(string.format("%s:%d: stragglers trace: column %d: '%s' is not a number > 0 and <= 1e9", path,
                              line, col, cell:match("^%s*(.-)%s*$")), 0)
        end
        row[col] = v
      end
      if col ~= n then error(row_error(path, line, n, col), 0) end
      rows[#rows + 1] = row
    end
  end
  return rows
end

-- The line of character offset i (1-based) of text.
local function line_of(text, i)
  local _, nl = text:sub(1, math.max(0, i - 1)):gsub("\n", "")
  return nl + 1
end

-- The line where the k-th row (0-based) of a JSON array of rows starts: the k-th '[' after the first.
local function json_row_line(text, k)
  local at = text:find("[", 1, true)
  for _ = 0, k do at = text:find("[", (at or #text) + 1, true) end
  return line_of(text, at or 1)
end

local function parse_json(path, text, n)
  local ok, v = pcall(cjson.decode, text)
  if not ok then
    local at = tonumber(tostring(v):match("at character (%d+)"))
    error(string.format("%s:%d: stragglers trace: not JSON (%s)", path, at and line_of(text, at) or 1,
                        tostring(v)), 0)
  end
  if type(v) ~= "table" or #v == 0 then
    error(string.format("%s:1: stragglers trace: a JSON array of rows (or one row) expected", path), 0)
  end
  if type(v[1]) ~= "table" then v = { v } end
  local rows = {}
  for k, row in ipairs(v) do
    local line = #v == 1 and 1 or json_row_line(text, k - 1)
    if type(row) ~= "table" then
      error(string.format("%s:%d: stragglers trace: row %d is not an array of numbers", path, line, k), 0)
    end
    if #row ~= n then error(row_error(path, line, n, #row), 0) end
    for col, x in ipairs(row) do
      if type(x) ~= "number" or not number(x) then
        error(string.format("%s:%d: stragglers trace: row %d, column %d: %s is not a number > 0 and <= 1e9",
                            path, line, k, col, cjson.encode(x)), 0)
      end
    end
    rows[k] = row
  end
  return rows
end

local cache = {}

--- trace.load(path, nodes) -> the rows, { {f_0, ..., f_nodes-1}, ... } (at least one); raises
-- naming file:line on a malformed file (read once per path).
function M.load(path, nodes)
  local key = path .. "\0" .. nodes
  if cache[key] then return cache[key] end
  local f, err = io.open(path, "rb")
  if not f then error("stragglers trace: cannot read " .. err, 0) end
  local text = f:read("a")
  f:close()
  if not text then error("stragglers trace: cannot read " .. path, 0) end
  text = text:gsub("^\239\187\191", "")   -- a spreadsheet's UTF-8 byte-order mark, invisible in a message
  local rows = (path:match("%.json$") and parse_json or parse_csv)(path, text, nodes)
  if #rows == 0 then error(string.format("%s:1: stragglers trace: no rows", path), 0) end
  cache[key] = rows
  return rows
end

--- trace.row(rows, r) -> round r's row (the trace repeats)
function M.row(rows, r) return rows[(r - 1) % #rows + 1] end

return M
