--- dpy.metrics: a node's metric series, written as <uid>.metrics.json:
-- {"uid": 0, "metrics": {"<name>": [[round, value], ...], ...}}, atomically after every save.
local cjson = require("cjson").new()
local host = require "dpy.host.core"

cjson.encode_invalid_numbers("null")   -- a diverged loss is written as null, not refused
cjson.encode_sparse_array(true)

local M = {}
local Tracker = {}
Tracker.__index = Tracker

--- metrics.new(uid, path) -> tracker
-- A series is held flat, { round, value, round, value, ... }: 33 bytes an entry, where a table a
-- pair cost 105, and a node records six entries a round (1,000 rounds: 193 KiB, not 612).
function M.new(uid, path)
  return setmetatable({ uid = uid, path = path, series = {}, other = {} }, Tracker)
end

--- tracker:add(name, round, value)
function Tracker:add(name, round, value)
  local s = self.series[name]
  if not s then
    s = {}
    self.series[name] = s
  end
  local n = #s
  if value == nil then value = cjson.null end
  if type(value) ~= "number" and value ~= cjson.null or type(round) ~= "number" then
    self.other[name] = true   -- not a number: saved pair by pair (below)
  end
  s[n + 1], s[n + 2] = round, value
end

--- tracker:last(name) -> round, value of the latest entry (nil if none)
function Tracker:last(name)
  local s = self.series[name]
  local n = s and #s or 0
  if n > 0 then return s[n - 1], s[n] end
end

-- A flat series as the file's list of pairs.
local function paired(s)
  local out = {}
  for i = 1, #s, 2 do out[#out + 1] = { s[i], s[i + 1] } end
  return out
end

--- tracker:export() -> { name = { {round, value}, ... } }, the file's form (a checkpoint holds it)
function Tracker:export()
  local out = {}
  for name, s in pairs(self.series) do out[name] = paired(s) end
  return out
end

--- tracker:import(series): the series of tracker:export (or of a metrics file) in place of its own
function Tracker:import(series)
  self.series, self.other = {}, {}
  for name, list in pairs(series or {}) do
    for _, e in ipairs(list) do self:add(name, math.tointeger(e[1]) or e[1], e[2]) end
  end
end

--- tracker:save() -> true | nil, err (write, fsync, rename: never a torn file). Each series is
-- encoded flat and its numbers then paired, so that the file is {"<name>": [[round, value], ...]}
-- without a table a pair (numbers and null hold no comma; a series with other values is paired
-- first).
function Tracker:save()
  local names = {}
  for name in pairs(self.series) do names[#names + 1] = name end
  table.sort(names)
  local parts = {}
  for i, name in ipairs(names) do
    local s, json = self.series[name]
    if self.other[name] then
      json = cjson.encode(paired(s))
    else
      json = "[" .. cjson.encode(s):sub(2, -2):gsub("([^,]+),([^,]+)", "[%1,%2]") .. "]"
    end
    parts[i] = cjson.encode(name) .. ":" .. json
  end
  return host.write_atomic(self.path, string.format('{"uid":%s,"metrics":{%s}}', cjson.encode(self.uid),
                                                    table.concat(parts, ",")))
end

--- metrics.read(path) -> the decoded table | nil, err
function M.read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local text = f:read("a")
  f:close()
  local ok, t = pcall(cjson.decode, text)
  if not ok then return nil, path .. ": " .. t end
  return t
end

--- metrics.diverged_at(series) -> the first round whose train or test loss is not finite (written
-- as null), or nil; series: a node's metrics table (metrics.read(path).metrics)
function M.diverged_at(series)
  local first
  for _, key in ipairs { "train_loss", "test_loss" } do
    for _, e in ipairs(series[key] or {}) do
      local v = e[2]
      if not (math.type(v) == "float" or math.type(v) == "integer") or v ~= v or v == math.huge
         or v == -math.huge then
        first = math.min(first or e[1], e[1])
        break
      end
    end
  end
  return first
end

-- lua-cjson writes every number with 14 significant digits, its most: a seed of 15 digits came
-- out as another seed in config.json and manifest.json. metrics.encode(value) writes what 14
-- digits do not hold exactly: integers (and integral floats) in full, other floats in the fewest
-- digits that read back to the same double. A copy of the value goes to cjson with such numbers
-- as marked strings, put back unquoted.
local MARK = "\xF4\x8F\xBF\xBFdpy#"   -- U+10FFFF, a noncharacter, which cjson passes as it is

local function exact(v)
  local i = math.tointeger(v)
  if i then return string.format("%d", i) end
  for digits = 15, 17 do
    local s = string.format("%." .. digits .. "g", v)
    if tonumber(s) == v then return s end
  end
end

function M.encode(value)
  local texts = {}
  local function copy(v)
    if type(v) == "number" then
      if v ~= v or v == math.huge or v == -math.huge or tonumber(string.format("%.14g", v)) == v then return v end
      texts[#texts + 1] = exact(v)
      return MARK .. #texts
    end
    if type(v) ~= "table" then return v end
    local t = {}
    for k, x in pairs(v) do t[k] = copy(x) end
    return t
  end
  local json = cjson.encode(copy(value))
  if #texts == 0 then return json end
  return (json:gsub('"' .. MARK .. '(%d+)"', function(i) return texts[tonumber(i)] end))
end

M.json = cjson
return M
