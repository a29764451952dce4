--- dpy.log: a node's <uid>.log, one timestamped line per event, flushed as written.
local M = {}
local Log = {}
Log.__index = Log

--- log.open(path, uid) -> log | nil, err
function M.open(path, uid)
  local f, err = io.open(path, "a")
  if not f then return nil, err end
  f:setvbuf("line")
  return setmetatable({ f = f, uid = uid }, Log)
end

--- log:write(fmt, ...)
function Log:write(fmt, ...)
  self.f:write(os.date("!%Y-%m-%dT%H:%M:%SZ"), " node ", tostring(self.uid), ": ",
               string.format(fmt, ...), "\n")
end

function Log:close() self.f:close() end

return M
