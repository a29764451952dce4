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
function M.new(uid, path)
  return setmetatable({ uid = uid, path = path, series = {} }, Tracker)
end

--- tracker:add(name, round, value)
function Tracker:add(name, round, value)
  local s = self.series[name]
  if not s then
    s = {}
    self.series[name] = s
  end
  s[#s + 1] = { round, value }
end

--- tracker:last(name) -> round, value of the latest entry (nil if none)
function Tracker:last(name)
  local s = self.series[name]
  local e = s and s[#s]
  if e then return e[1], e[2] end
end

--- tracker:save() -> true | nil, err (write, fsync, rename: never a torn file)
function Tracker:save()
  return host.write_atomic(self.path, cjson.encode({ uid = self.uid, metrics = self.series }))
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

M.json = cjson
return M
