-- Loaded by busted before the specs (--helper): small shared utilities, as globals the specs use.
local host = require "dpy.host.core"

-- The dpy-lua binary under test (set by ctest), for specs that run it as a process.
DPY_BIN = os.getenv("DPY_BIN") or "build/dpy-lua"

local counter = 0
--- A fresh empty directory under /tmp.
function tmpdir()
  counter = counter + 1
  local dir = string.format("/tmp/dpy_spec_%d_%d_%d", os.time(), math.random(1 << 30), counter)
  assert(host.mkdir_p(dir))
  return dir
end

--- Writes bytes to path.
function write_file(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

--- Reads a whole file (nil if missing).
function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- Runs a shell command; returns its exit code, stdout and stderr.
function sh(cmd)
  local out, err = os.tmpname(), os.tmpname()
  local ok, _, code = os.execute(string.format("(%s) >%s 2>%s", cmd, out, err))
  local o, e = read_file(out), read_file(err)
  os.remove(out)
  os.remove(err)
  return ok and 0 or code, o, e
end

--- Single-quotes s for the shell.
function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
