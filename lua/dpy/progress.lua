--- dpy.progress: a live status line on a terminal (redrawn at most 10 times a second); where
-- stderr is not a terminal (nohup, Slurm, CI, mpirun), the same text as a plain line at most
-- every DPY_PROGRESS_SECONDS (10) seconds, and the last one at the end. Quiet: nothing.
local host = require "dpy.host.core"

local M = {}
local Progress = {}
Progress.__index = Progress

M.EVERY = 10   -- seconds between plain lines (DPY_PROGRESS_SECONDS overrides)

--- progress.new([opts]) -> p; opts = { stream = io.stderr, quiet = false }
function M.new(opts)
  opts = opts or {}
  local stream = opts.stream or io.stderr
  local every = tonumber(os.getenv("DPY_PROGRESS_SECONDS") or "") or M.EVERY
  return setmetatable({ stream = stream, tty = stream == io.stderr and host.isatty(2), quiet = opts.quiet,
                        every = every, last = -math.huge, shown = false }, Progress)
end

--- "1:05" or "1:02:03"
function M.duration(s)
  if s ~= s or s == math.huge then return "?" end
  s = math.floor(s + 0.5)
  local h, m = s // 3600, s % 3600 // 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, s % 60) end
  return string.format("%d:%02d", m, s % 60)
end

--- p:update(text [, force]): redraws the live line (a terminal), or writes it as a plain line
-- when the last is old enough (elsewhere)
function Progress:update(text, force)
  if self.quiet then return end
  local now = host.clock()
  if self.tty then
    if not force and now - self.last < 0.1 then return end
    self.last = now
    self.stream:write("\r\27[K", text)
    self.shown = true
  else
    self.pending = text ~= self.written and text or nil
    if not self.pending or (not force and now - self.last < self.every) then return end
    self.last, self.written, self.pending = now, text, nil
    self.stream:write(text, "\n")
  end
  self.stream:flush()
end

--- p:warn(text): a permanent line that -q does not silence (a process stopped, a file lost);
-- it clears the live line first
function Progress:warn(text)
  if self.shown then self.stream:write("\r\27[K") end
  self.stream:write(text, "\n")
  self.stream:flush()
  self.shown = false
end

--- p:line(text): a permanent line (nothing when quiet)
function Progress:line(text)
  if not self.quiet then self:warn(text) end
end

--- p:done(): ends the live line (elsewhere: writes the last text not yet written)
function Progress:done()
  if self.quiet then return end
  if self.shown then self.stream:write("\r\27[K") end
  if self.pending then
    self.stream:write(self.pending, "\n")
    self.written, self.pending = self.pending, nil
  end
  self.stream:flush()
  self.shown = false
end

return M
