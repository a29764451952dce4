-- Loaded by busted before the specs (--helper): small shared utilities, as globals the specs use.
local host = require "dpy.host.core"

--- The repository's root, absolute (from this file's own path).
REPO = (function()
  local here = debug.getinfo(1, "S").source:match("^@(.*)/tests/helpers/preload%.lua$") or "."
  local p = io.popen("cd '" .. here:gsub("'", "'\\''") .. "' && pwd")
  local abs = p:read("l")
  p:close()
  return abs
end)()

-- The dpy-lua binary under test (set by ctest), for specs that run it as a process.
DPY_BIN = os.getenv("DPY_BIN") or REPO .. "/build/dpy-lua"

-- Specs draw ports and names from math.random. Lua seeds it from the time and the addresses of
-- its state, and the sanitizer build runs without address randomization: two specs started in
-- the same second (ctest -j) drew the same ports and directories. The process id tells them apart.
math.randomseed(os.time(), host.pid())

-- Every directory a spec file makes lies under one root of its own, which run_busted.lua removes
-- when the file passes (a failed file's stay for a look): left behind, the suite's runs filled
-- the disk.
local root = string.format("/tmp/dpy_spec_%d_%d_%d", host.pid(), os.time(), math.random(1 << 30))
local counter = 0
--- A fresh empty directory under /tmp (its name has the process id too).
function tmpdir()
  counter = counter + 1
  local dir = root .. "/" .. counter
  assert(host.mkdir_p(dir))
  return dir
end

--- Removes every directory tmpdir made.
function remove_tmpdirs()
  if counter > 0 then os.execute("rm -rf '" .. root .. "'") end
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

-- The words of a command line whose words are plain or single-quoted, between blanks and tabs
-- (nothing else the shell would expand, redirect, chain or end), unquoted; else nil.
local function plain_words(cmd)
  local words, i = {}, cmd:match("^[ \t]*()")
  while i <= #cmd do
    local word, j = {}, i
    while j <= #cmd and not cmd:sub(j, j):match("[ \t]") do
      local quoted, after = cmd:match("^'([^']*)'()", j)
      local bare, after2 = cmd:match("^([%w%-%._/=:,+@%%]+)()", j)
      if quoted then word[#word + 1], j = quoted, after
      elseif bare then word[#word + 1], j = bare, after2
      else return nil end
    end
    words[#words + 1] = table.concat(word)
    i = cmd:match("^[ \t]*()", j)
  end
  return words
end

-- The words of "[cd /DIR && ]WORD ... [< FILE]" (plain_words), DIR (an absolute path) and FILE;
-- else nil.
local function command_words(cmd)
  local input
  local head, file = cmd:match("^(.-)[ \t]+<[ \t]*([^ \t]+)[ \t]*$")
  if head then
    file = plain_words(file)
    if not file or #file ~= 1 then return nil end
    cmd, input = head, file[1]
  end
  local cd, rest = cmd:match("^[ \t]*cd[ \t]+([^ \t]+)[ \t]+&&[ \t]+(.*)$")
  if not cd then return plain_words(cmd), nil, input end
  local dir = plain_words(cd)
  if dir and #dir == 1 and dir[1]:sub(1, 1) == "/" then   -- the input named from DIR, as after the cd
    if input and input:sub(1, 1) ~= "/" then input = dir[1] .. "/" .. input end
    return plain_words(rest), dir[1], input
  end
end

-- Runs argv (DPY_BIN and its arguments) forked from this process, which has libtorch loaded:
-- an executed dpy-lua costs 0.6-0.9 s of CPU before its first line, 2-3 s under the sanitizers,
-- and the specs run hundreds (host.spawn; spawn.c executes it instead when this process has
-- started threads). DPY_TEST_FORK=0 runs every command through the shell.
-- limit (seconds) and sig: as "timeout [-s SIG] LIMIT" runs it: sig at the limit, then exit 124
-- (137 for KILL, as timeout(1) exits after a KILL).
local function forked(argv, dir, out, err, limit, sig, input)
  local pid = host.spawn(argv, out, { err = err, dir = dir, input = input })
  if not pid or not limit then return pid and host.wait(pid) end
  local deadline = host.clock() + limit
  repeat
    local code = host.wait(pid, true)
    if code then return code end
    host.sleep(0.02)
  until host.clock() > deadline
  host.kill(pid, sig)
  host.wait(pid)
  return sig == 9 and 137 or 124
end

local SIGNALS = { TERM = 15, KILL = 9 }
-- "timeout [-s TERM|KILL] SECONDS WORD...": the words after, the limit and the signal; else nil.
local function timeout_words(argv)
  if not argv or argv[1] ~= "timeout" then return nil end
  local sig, i = 15, 2
  if argv[2] == "-s" then sig, i = SIGNALS[argv[3]], 4 end
  local limit = tonumber(argv[i])
  if sig and limit then return table.move(argv, i + 1, #argv, 1, {}), limit, sig end
end

local FORK = os.getenv("DPY_TEST_FORK") ~= "0"
-- The specs' own tensor work on one thread: once libgomp has started its pool here, spawn.c can
-- no longer fork (a forked child gets main's thread count back).
if FORK then host.set_threads(1) end

--- Runs a shell command; returns its exit code, stdout and stderr.
function sh(cmd)
  local out, err = os.tmpname(), os.tmpname()
  local argv, dir, input = command_words(cmd)
  local limit, sig
  if argv and argv[1] == "timeout" then argv, limit, sig = timeout_words(argv) end
  local code = FORK and argv and argv[1] == DPY_BIN and forked(argv, dir, out, err, limit, sig, input)
  if not code then
    local ok, _, status = os.execute(string.format("(%s) >%s 2>%s", cmd, out, err))
    code = ok and 0 or status
  end
  local o, e = read_file(out), read_file(err)
  os.remove(out)
  os.remove(err)
  return code, o, e
end

--- Waits (60 s at most) until every node that client (dpy.attach.client) reaches is paused: a
-- run started with --paused, its nodes built.
function wait_paused(client)
  for _ = 1, 600 do
    local list, all = client:node_list(), true
    for _, n in ipairs(list) do all = all and n.state == "paused" end
    if all and #list > 0 then return end
    require("dpy.host.core").sleep(0.1)
  end
end

--- Single-quotes s for the shell.
function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- start_sshd(dir [, address...]) -> port: the test OpenSSH server (SSHD, tests/ssh/sshd) with its keys
-- in dir, on a port below the system's range for outgoing connections, another while one is taken
-- (a port drawn in that range was once held by a connection's own end, and the spec failed)
SSHD = shell_quote(REPO .. "/tests/ssh/sshd")
function start_sshd(dir, ...)
  local code, out, err = sh(string.format("%s start %s auto %s", SSHD, shell_quote(dir), table.concat({ ... }, " ")))
  assert(code == 0, err)
  return assert(math.tointeger(tonumber(out:match("%d+"))), out)
end

--- stop_sshd(dir): stops the server start_sshd started with dir
function stop_sshd(dir)
  sh(string.format("%s stop %s", SSHD, shell_quote(dir)))
end

--- Waits for process pid (host.spawn) to exit, at most seconds (default 120); returns its exit
-- code. One still running then is killed, and the wait raises.
function wait_exit(pid, seconds)
  for _ = 1, math.floor((seconds or 120) * 10) do
    local code = host.wait(pid, true)
    if code then return code end
    host.sleep(0.1)
  end
  host.kill(pid, 9)
  error("process " .. pid .. " did not finish", 2)
end

-- {==== decentralized runs through the binary ====}

--- A 4-node ring run of 3 short rounds on a slice of Fashion-MNIST: seconds, not minutes.
TINY_RUN = "seed = 2\nnodes = 4\ngraph = 'ring'\nrounds = 3\nlocal_steps = 3\nbatch_size = 16\n"
           .. "train_samples = 2000\ntest_samples = 100\neval_every = 1\npeer_timeout = 20\n"

--- Runs a config given as text; returns exit code, stdout, stderr and the run directory.
function run_config(config_text, extra)
  local dir = tmpdir()
  write_file(dir .. "/c.lua", config_text)
  local code, out, err = sh(shell_quote(DPY_BIN) .. " run " .. dir .. "/c.lua --out " .. dir
                            .. "/out " .. (extra or ""))
  return code, out, err, dir .. "/out"
end

--- Runs config_text in one process and in two (run_config); both must succeed. Returns their run
-- directories, { [1] = one process's, [2] = two processes' }, for comparing layouts.
function run_layouts(config_text)
  local outs = {}
  for _, p in ipairs { 1, 2 } do
    local code, _, err, out = run_config(config_text, "processes=" .. p)
    if code ~= 0 then error(string.format("processes=%d exited with %s:\n%s", p, tostring(code), err), 2) end
    outs[p] = out
  end
  return outs
end

--- Writes an action file that runs body (statements; node, r and host in scope) on event, after
-- prelude (statements at the file's top); returns the config line that loads it. event may also
-- be a table { event = body, ... } (body then nil).
function action_config(name, event, body, prelude)
  local handlers = {}
  for ev, b in pairs(type(event) == "table" and event or { [event] = body }) do
    handlers[#handlers + 1] = string.format("%s = function(node, r) %s end", ev, b)
  end
  local path = tmpdir() .. "/" .. name .. ".lua"
  write_file(path, string.format([[
    local registry = require "dpy.registry"
    local host = require "dpy.host.core"
    %s
    return registry.register { kind = "action", name = %q,
      new = function() return { %s } end }
  ]], prelude or "", name, table.concat(handlers, ", ")))
  return "actions = { '" .. path .. "' }\n"
end

--- A node's metric series of a run directory (nil if unreadable).
function node_metrics(out, uid)
  local m = require("dpy.metrics").read(string.format("%s/%d.metrics.json", out, uid))
  return m and m.metrics
end
