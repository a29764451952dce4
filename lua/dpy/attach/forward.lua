--- dpy.attach.forward: reaching the control socket of a process on another host (a rank of
-- mpirun or Slurm) through the user's own OpenSSH client: `ssh -N -L LOCAL:REMOTE HOST`
-- forwards a Unix socket in a private local folder to the process's socket (OpenSSH's
-- streamlocal forwarding), so nothing listens on the network and ssh's own configuration,
-- keys, agent and known hosts decide who gets in.
local core = require "dpy.attach.core"
local host = require "dpy.host.core"
local paths = require "dpy.paths"

local M = {}
local Forward = {}
Forward.__index = Forward

--- forward.folder() -> a new private folder (mode 0700) for the local ends | nil, message
function M.folder()
  local p = io.popen("mktemp -d /tmp/dpy-attach-forward.XXXXXX 2>&1")   -- mode 0700
  local dir = p:read("l")
  local ok = p:close()
  if not ok or not dir then return nil, "mktemp: " .. tostring(dir) end
  return dir
end

--- forward.connect{ ssh, host, remote, here, log, timeout } -> connection, forward | nil, message
-- ssh: the command (words a shell splits: "ssh -J login"); remote: the socket's path on host;
-- here: the path of the local end; log: where ssh's messages go (removed when it fails).
function M.connect(o)
  -- SIGINT ignored, which OpenSSH keeps: Ctrl-C at the prompt interrupts the node's code, not the
  -- forward; a hang-up of the terminal still ends it
  local pid, err = host.spawn({ "/bin/sh", "-c", 'trap "" INT; exec ' .. o.ssh .. ' "$@"', "ssh", "-n", "-N",
                                "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
                                "-L", o.here .. ":" .. o.remote, o.host }, o.log)
  if not pid then return nil, "cannot start " .. o.ssh .. ": " .. err end
  local self = setmetatable({ pid = pid, here = o.here, log = o.log }, Forward)
  local deadline = host.clock() + (o.timeout or 30)
  while host.clock() < deadline do
    local code = host.wait(pid, true)
    if code then
      self.pid = nil
      local f = io.open(o.log)
      local said = f and f:read("a"):gsub("%s+$", ""):match("[^\n]*$") or ""
      if f then f:close() end
      os.remove(o.log)
      return nil, string.format("%s %s exited with %d%s", o.ssh, paths.shell_quote(o.host), code,
                                said ~= "" and ": " .. said or "")
    end
    local c = core.connect(o.here)
    if c then return c, self end
    host.sleep(0.05)
  end
  self:close()
  return nil, string.format("%s %s: no forward after %d s", o.ssh, paths.shell_quote(o.host), o.timeout or 30)
end

--- forward:close(): ends ssh and removes the local end and the log
function Forward:close()
  if self.pid then
    host.kill(self.pid, 15)
    host.wait(self.pid)
    self.pid = nil
  end
  os.remove(self.here)
  os.remove(self.log)
end

return M
