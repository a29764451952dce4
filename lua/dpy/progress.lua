--- dpy.progress: a live status line on a terminal (redrawn at most 10 times a second), plain
-- lines elsewhere (only when asked to, so logs stay short).
local host = require "dpy.host.core"

local M = {}
local Progress = {}
Progress.__index = Progress

--- progress.new([stream = io.stderr]) -> p
function M.new(stream)
  stream = stream or io.stderr
  return setmetatable({ stream = stream, tty = stream == io.stderr and host.isatty(2),
                        last = 0, shown = false }, Progress)
end

--- "1:05" or "1:02:03"
function M.duration(s)
  if s ~= s or s == math.huge then return "?" end
  s = math.floor(s + 0.5)
  local h, m = s // 3600, s % 3600 // 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, s % 60) end
  return string.format("%d:%02d", m, s % 60)
end

--- p:update(text [, force]): redraws the live line (a terminal only)
function Progress:update(text, force)
  if not self.tty then return end
  local now = host.clock()
  if not force and now - self.last < 0.1 then return end
  self.last = now
  self.stream:write("\r\27[K", text)
  self.stream:flush()
  self.shown = true
end

--- p:line(text): a permanent line (clears the live one first)
function Progress:line(text)
  if self.shown then self.stream:write("\r\27[K") end
  self.stream:write(text, "\n")
  self.stream:flush()
  self.shown = false
end

--- p:done(): ends the live line
function Progress:done()
  if self.shown then self.stream:write("\r\27[K") end
  self.stream:flush()
  self.shown = false
end

return M
