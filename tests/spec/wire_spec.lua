-- The run key: a fresh random one per multi-process run, mode 0600 in the run directory, in no
-- log, manifest or command line; authenticated (and encrypted) runs by tcp, and runs on a Unix
-- socket (through shared memory, and without), give the same numbers.
local BIN = shell_quote(DPY_BIN)
local metrics = require "dpy.metrics"

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

-- every file under dir but the key itself
local function other_files(dir)
  local _, out = sh("find " .. shell_quote(dir) .. " -type f ! -name run.key")
  local list = {}
  for path in out:gmatch("[^\n]+") do list[#list + 1] = path end
  return list
end

describe("the run key #e2e", function()
  local dir
  setup(function()
    dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN)
    local code, _, err = sh(BIN .. " run " .. dir .. "/c.lua --out " .. dir .. "/one")
    assert.are.equal(0, code, err)
  end)

  local function run(name, extra)
    local code, out, err = sh(BIN .. " run " .. dir .. "/c.lua processes=2 " .. (extra or "") .. " --out "
                              .. dir .. "/" .. name)
    assert.are.equal(0, code, err)
    return dir .. "/" .. name, out .. err
  end

  it("is made fresh for each run, 0600, and appears in no other file, output or argv", function()
    local out, printed = run("two")
    local key = read_file(out .. "/run.key")
    assert.are.equal(32, #key)
    local _, mode = sh("stat -c %a " .. shell_quote(out .. "/run.key"))
    assert.are.equal("600", mode:match("%d+"))
    local files = other_files(out)
    assert.is_true(#files > 5)
    for _, path in ipairs(files) do
      local text = read_file(path)
      assert.is_nil(text:find(key, 1, true), path)
      assert.is_nil(text:find(hex(key), 1, true), path)
    end
    assert.is_nil(printed:find(key, 1, true))
    assert.is_nil(printed:find(hex(key), 1, true))
    assert.is_nil(read_file(out .. "/manifest.json"):find("run.key", 1, true))
    local again = run("two", "--force")   -- the same directory again: another key
    assert.are_not.equal(key, read_file(again .. "/run.key"))
  end)

  it("gives the same numbers by tcp, authenticated and encrypted, on a Unix socket with and without shared memory, "
     .. "and in one process", function()
    local plain = run("mac", "unix_sockets=false")
    local sealed = run("enc", "unix_sockets=false encrypt=true")
    local local_socket = run("unix")
    local socket_alone = run("socket", "shared_memory=false")
    -- how each process reached the other, and the bytes it sent it through shared memory, as its
    -- progress file records them
    local function progress(out, p) return metrics.read(string.format("%s/progress-%d.json", out, p)) end
    local function link(out, p, q) return progress(out, p).links[tostring(q)] end
    local function shared(out, p, q) return progress(out, p).shared_bytes[tostring(q)] end
    assert.are.same({ "tcp", "tcp", "unix", "unix", "unix" },
                    { link(plain, 0, 1), link(sealed, 1, 0), link(local_socket, 0, 1), link(local_socket, 1, 0),
                      link(socket_alone, 0, 1) })
    -- two nodes a process on a ring of four: each process sends the other 2 models a round (the
    -- cnn's 215,370 values), 3 rounds, through the ring: the ring holds two, and its reader takes a
    -- round's before the next (a piece it has no room for, its reader far behind, goes on the socket)
    local models = 3 * 2 * 215370 * 4
    for _, p in ipairs { 0, 1 } do
      local through = shared(local_socket, p, 1 - p)
      assert.is_true(through > models / 2 and through <= models, tostring(through))
    end
    assert.are.same({ 0, 0, 0 }, { shared(socket_alone, 0, 1), shared(plain, 0, 1), shared(sealed, 1, 0) })
    for uid = 0, 3 do
      local one = node_metrics(dir .. "/one", uid)
      for _, out in ipairs { plain, sealed, local_socket, socket_alone } do
        assert.are.same(one.test_accuracy, node_metrics(out, uid).test_accuracy, out .. " node " .. uid)
        assert.are.same(one.train_loss, node_metrics(out, uid).train_loss, out .. " node " .. uid)
      end
    end
  end)

  it("refuses a key file others can read", function()
    local out = run("bad")
    assert.is_true(os.execute("chmod 644 " .. shell_quote(out .. "/run.key")))
    local code, _, err = sh(BIN .. " node " .. dir .. "/c.lua processes=2 --process 1 --dir " .. out
                            .. " --run-id 5")
    assert.are.equal(1, code)
    assert.matches("run key .*run.key has mode 644: only its owner may read it %(0600%)", err)
  end)
end)

describe("the processes' ports", function()
  it("are drawn below the system's range for outgoing connections, where no connection can hold them", function()
    local layout = require "dpy.layout"
    local low = tonumber((read_file("/proc/sys/net/ipv4/ip_local_port_range") or "32768"):match("%d+"))
    for _, id in ipairs { 1, 7919, 696613084981, 1 << 40 } do
      for _, processes in ipairs { 2, 16, 64 } do
        local base = layout.base_port({ processes = processes }, id)
        assert.is_true(base >= 1024 and base + processes - 1 < low, string.format("%d..%d", base, base + processes - 1))
      end
    end
    assert.are.equal(40000, layout.base_port({ port = 40000, processes = 4 }, 1))   -- the config's, as it is
  end)

  it("are held from the choice on: runs of 4 processes started together all finish", function()
    -- their run ids (clock and pid) were neighbours, and so were the ports drawn from them: both
    -- launchers found them free, and a process of one run could not listen
    local dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN:gsub("rounds = 3", "rounds = 1") .. "processes = 4\n")
    local script = {}
    for k = 1, 3 do
      script[#script + 1] = string.format("(%s run %s/c.lua --out %s/r%d -q >%s/r%d.txt 2>&1; echo $? >%s/r%d.code) &",
                                          BIN, dir, dir, k, dir, k, dir, k)
    end
    script[#script + 1] = "wait"
    write_file(dir .. "/together.sh", table.concat(script, "\n") .. "\n")
    os.execute("sh " .. dir .. "/together.sh")
    for k = 1, 3 do
      assert.are.equal("0", (read_file(string.format("%s/r%d.code", dir, k)) or ""):match("%d+"),
                       read_file(string.format("%s/r%d.txt", dir, k)))
    end
  end)

  it("skip a first pick another run on this machine holds, and a named port it holds is an error", function()
    local layout, host = require "dpy.layout", require "dpy.host.core"
    local dir = tmpdir()
    local port = 20000 + math.random(0, 9000)
    write_file(dir .. "/a.lua", TINY_RUN:gsub("rounds = 3", "rounds = 400") .. "processes = 2\n")
    write_file(dir .. "/bg.sh", string.format("echo $$ >%s/pid\nexec %s run %s/a.lua port=%d --out %s/a -q\n",
                                              dir, BIN, dir, port, dir))
    os.execute("sh " .. dir .. "/bg.sh >/dev/null 2>&1 &")
    local t0 = host.clock()
    while not read_file(dir .. "/a/progress-1.json") and host.clock() - t0 < 60 do host.sleep(0.1) end
    local ok, err = pcall(function()
      local cfg = { processes = 4, host = "127.0.0.1" }
      local id = port - 1 - 10000   -- its first pick: port - 1 .. port + 2, two of them run A's
      assert.are.equal(port - 1, layout.base_port(cfg, id))
      local free, why = host.port_free("127.0.0.1", port)
      assert.is_false(free)
      assert.matches("in use", why)
      local base, fds = layout.hold_ports(cfg, id)
      assert.are_not.equal(port - 1, base)
      assert.are.equal(4, #fds)
      for p = 0, 3 do   -- held: listening here until closed
        assert.is_false(host.port_free("127.0.0.1", base + p))
        host.close(fds[p + 1])
        assert.is_true(host.port_free("127.0.0.1", base + p))
      end
      local named, why2 = pcall(layout.hold_ports, { processes = 4, host = "127.0.0.1", port = port }, id)
      assert.is_false(named)
      assert.matches("port: cannot listen on 127.0.0.1:" .. port .. ": Address already in use", why2, 1, true)
    end)
    host.kill(tonumber(read_file(dir .. "/pid")), 15)   -- run A forwards it to its processes
    assert(ok, err)
  end)
end)

describe("packets and connections from outside #e2e", function()
  it("are counted in the run's summary, by kind, beside the processes' logs that name their sources", function()
    local host = require "dpy.host.core"
    local dir = tmpdir()
    local port = 20000 + math.random(0, 9000)
    write_file(dir .. "/c.lua", TINY_RUN .. "processes = 2\nport = " .. port .. "\n")
    local out = dir .. "/out"
    local pid = assert(host.spawn({ DPY_BIN, "run", dir .. "/c.lua", "--out", out, "--paused", "-q" },
                                  dir .. "/run.out"))
    local client
    for _ = 1, 300 do   -- every process listening, paused before its first round
      client = require("dpy.attach.client").open(out)
      if client then break end
      host.sleep(0.1)
    end
    assert(client, read_file(dir .. "/run.out"))
    for k = 1, 3 do   -- 64 bytes that are no header, to either process
      local code = sh(string.format("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf %%064d 0 >&3 && sleep 0.2'",
                                    port + k % 2))
      assert.are.equal(0, code)
    end
    client:resume()
    client:close()
    assert.are.equal(0, wait_exit(pid, 60), read_file(dir .. "/run.out"))
    local text = read_file(dir .. "/run.out")
    assert.matches("  3 packets or connections refused by the processes' checks (header 3; "
                   .. "process-<p>.out names the first from each source)", text, 1, true)
    assert.matches("header", read_file(out .. "/process-0.out") .. read_file(out .. "/process-1.out"))
  end)
end)
