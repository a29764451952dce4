-- dpy.ssh.core's connect against a real OpenSSH server (tests/ssh/sshd) when the host name
-- resolves to more than one address: every address is tried in order, as OpenSSH does. Debian 12's
-- /etc/hosts maps localhost to ::1 and 127.0.0.1; the spec gives dpy-lua that file in a private
-- mount namespace of its own (unshare), so the machine's /etc/hosts is never touched.
local BIN = shell_quote(DPY_BIN)

local DEBIAN_HOSTS = "127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n\n"
                     .. "# The following lines are desirable for IPv6 capable hosts\n"
                     .. "::1     localhost ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\nff02::2 ip6-allrouters\n"

describe("dpy.ssh.core.connect", function()
  local dir, hosts, can_unshare

  setup(function()
    dir = tmpdir()
    hosts = dir .. "/hosts"
    write_file(hosts, DEBIAN_HOSTS)
    can_unshare = sh("unshare -rm sh -c " .. shell_quote("mount --bind " .. hosts .. " /etc/hosts")) == 0
  end)

  -- Runs a connect to host:port with the keys of dir/keys, with /etc/hosts as Debian 12 has it.
  local function connect(keys, port, host)
    write_file(dir .. "/connect.lua", string.format([[
local function fds()   -- open descriptors: a closed session leaves none behind
  local p = io.popen("ls /proc/" .. require("dpy.host.core").pid() .. "/fd")
  local n = #p:read("a"):gsub("[^\n]", "")
  p:close()
  return n
end
local counts = {}
for i = 1, 8 do   -- a leak grows with every session; a transient or one-time descriptor does not
  local s, err = require("dpy.ssh.core").connect { host = %q, port = %d, identity = %q, known_hosts = %q }
  if not s then io.stderr:write(err, "\n") os.exit(1) end
  local code, out = s:exec("echo connected")
  s:close()
  counts[i] = fds()
  if i <= 3 then io.write(code, " ", out) end
end
if math.min(counts[6], counts[7], counts[8]) > math.max(counts[2], counts[3], counts[4]) then
  io.stderr:write("a descriptor leaked: ", table.concat(counts, " "), "\n") os.exit(1)
end
]], host, port, keys .. "/user_key", keys .. "/known_hosts"))
    return sh("unshare -rm sh -c " .. shell_quote("mount --bind " .. hosts .. " /etc/hosts && getent ahosts "
              .. host .. " | head -1 >&2 && exec " .. BIN .. " " .. dir .. "/connect.lua"))
  end

  for _, listen in ipairs { "127.0.0.1", "::1" } do
    it("reaches a server listening on " .. listen .. " only through 'localhost' (::1 and 127.0.0.1)", function()
      if not can_unshare then
        pending("unshare -rm cannot make a private mount namespace here")
        return
      end
      local keys = dir .. "/keys-" .. listen:gsub(":", "")
      local port = start_sshd(keys, listen)
      local ok, run = pcall(function()
        local rc, out, cerr = connect(keys, port, "localhost")
        assert.matches("^::1", cerr, "the hosts file puts ::1 first")
        assert.are.equal(0, rc, cerr)
        assert.are.equal(("0 connected\n"):rep(3), out)
      end)
      stop_sshd(keys)
      assert(ok, run)
    end)
  end

  it("names every address it tried when none answers", function()
    if not can_unshare then
      pending("unshare -rm cannot make a private mount namespace here")
      return
    end
    local port = 45000 + math.random(0, 9999)   -- nothing listens there
    local rc, _, err = connect(dir, port, "localhost")
    assert.are.equal(1, rc)
    assert.matches("localhost:" .. port .. ": cannot connect: %[::1%]:" .. port .. ": Connection refused; "
                   .. "127%.0%.0%.1:" .. port .. ": Connection refused", err)
  end)

  it("says when the name does not resolve", function()
    local s, err = require("dpy.ssh.core").connect { host = "no-such-host.invalid", port = 22 }
    assert.is_nil(s)
    assert.matches("no%-such%-host%.invalid:22: cannot resolve no%-such%-host%.invalid: ", err)
  end)
end)

describe("the test OpenSSH server (tests/ssh/sshd)", function()
  it("listens below the system's range for outgoing connections, and on another port while one is taken", function()
    -- a port drawn in that range was once held by a connection's own end: sshd could not bind it
    local low = tonumber((read_file("/proc/sys/net/ipv4/ip_local_port_range") or "32768"):match("%d+"))
    local a, b = tmpdir() .. "/a", tmpdir() .. "/b"
    local held = start_sshd(a, "127.0.0.1")
    local ok, err = pcall(function()
      assert.is_true(held >= 1024 and held < low, tostring(held))
      local code, out, e = sh("SSHD_FIRST_PORT=" .. held .. " " .. SSHD .. " start " .. b .. " auto 127.0.0.1")
      assert.are.equal(0, code, e)
      local port = math.tointeger(tonumber(out:match("%d+")))
      assert.is_true(port ~= held and port >= 1024 and port < low, tostring(port))
      -- the server there is b's: its host key is the one b's known_hosts names for that port
      local rc, said, serr = sh(string.format("ssh -p %d -i %s -o UserKnownHostsFile=%s -o BatchMode=yes "
                                              .. "-o StrictHostKeyChecking=yes 127.0.0.1 echo reached", port,
                                              b .. "/user_key", b .. "/known_hosts"))
      assert.are.equal(0, rc, serr)
      assert.are.equal("reached\n", said)
      -- a port given and taken is refused, naming the server's log
      local code2, _, e2 = sh(SSHD .. " start " .. tmpdir() .. "/c " .. held .. " 127.0.0.1")
      assert.are.equal(1, code2)
      assert.matches("sshd did not start; see .*sshd.log", e2)
    end)
    stop_sshd(a)
    stop_sshd(b)
    assert(ok, err)
  end)
end)

describe("dpy.ssh.core.exec_all", function()
  local ssh = require "dpy.ssh.core"
  local host = require "dpy.host.core"
  local keys, port

  setup(function()
    keys = tmpdir() .. "/keys"
    port = start_sshd(keys, "127.0.0.1")
  end)
  teardown(function() stop_sshd(keys) end)

  local function session()
    return assert(ssh.connect { host = "127.0.0.1", port = port, identity = keys .. "/user_key",
                                known_hosts = keys .. "/known_hosts" })
  end

  it("runs the commands side by side and gives each its exit code, stdout and stderr, in order", function()
    local a, b, c = session(), session(), session()
    -- each notes when its second of sleep began and ended: side by side, every one began before
    -- any ended (the channels open one after another, which a loaded machine may make slow)
    local times = tmpdir()
    local function timed(name, rest)
      return string.format("date +%%s.%%N > %s/%s.began; sleep 1; date +%%s.%%N > %s/%s.ended; %s",
                           times, name, times, name, rest)
    end
    local r = ssh.exec_all { { a, timed("a", "echo A; echo a >&2; exit 3") }, { b, timed("b", "echo B") },
                             { c, timed("c", "printf C") } }
    assert.are.same({ { 3, "A\n", "a\n" }, { 0, "B\n", "" }, { 0, "C", "" } }, r)
    local last_began, first_ended = -math.huge, math.huge
    for _, name in ipairs { "a", "b", "c" } do
      last_began = math.max(last_began, tonumber(read_file(times .. "/" .. name .. ".began")))
      first_ended = math.min(first_ended, tonumber(read_file(times .. "/" .. name .. ".ended")))
    end
    assert.is_true(last_began < first_ended, string.format("one began %.2f s after another ended",
                                                           last_began - first_ended))
    assert.are.same({}, ssh.exec_all {})
    -- ten at a time on each of three sessions (sshd's MaxSessions), each its own output
    local many = {}
    for k = 1, 30 do many[k] = { ({ a, b, c })[k % 3 + 1], "echo " .. k } end
    for k, result in ipairs(ssh.exec_all(many)) do assert.are.same({ 0, k .. "\n", "" }, result) end
    for _, s in ipairs { a, b, c } do s:close() end
  end)

  it("names a command that outlives the timeout or cannot start, and still runs the others", function()
    local a, b = session(), session()
    local t0 = host.clock()
    -- 2 s: a session's command on a loaded machine (the suite's other tests) can take over 0.5
    local r = ssh.exec_all({ { a, "sleep 8" }, { b, "echo B" } }, 2)
    assert.is_true(host.clock() - t0 < 5, string.format("took %.1f s", host.clock() - t0))
    assert.is_nil(r[1][1])
    assert.matches("127%.0%.0%.1:" .. port .. ": 'sleep 8' did not finish within 2 s", r[1][2])
    assert.are.same({ 0, "B\n", "" }, r[2])
    b:exec("kill $PPID")   -- the server's end of session b goes
    host.sleep(0.3)
    r = ssh.exec_all { { b, "echo B" }, { a, "echo A" } }
    assert.is_nil(r[1][1])
    assert.matches("cannot run a command", r[1][2])
    assert.are.same({ 0, "A\n", "" }, r[2])
    assert.has_error(function() b:exec("echo B") end)
    local ok, err = pcall(ssh.exec_all, { { a } })
    assert.is_false(ok)
    assert.matches("bad argument #1 to .*({session, command} pairs expected)", err)
    a:close() b:close()
  end)
end)
