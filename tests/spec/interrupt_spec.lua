-- Stopping a run, end to end through the dpy-lua binary: a hung (SIGSTOPped) child is killed
-- after the grace period; Ctrl-C / SIGTERM stop every node at once, keep the finished rounds,
-- mark the manifest and exit 130 / 143, leaving no process and no temporary file behind; a process
-- that fails while its peers are still connecting ends the run at once.
local host = require "dpy.host.core"
local metrics = require "dpy.metrics"
local BIN = shell_quote(DPY_BIN)

-- The ids of the processes whose command line names dir (this spec's own runs).
local function procs_of(dir)
  local pids = {}
  for _, name in ipairs(require("dpy.paths").list("/proc") or {}) do
    local cmd = name:match("^%d+$") and read_file("/proc/" .. name .. "/cmdline")
    if cmd and cmd:find(dir, 1, true) and cmd:find("dpy-lua", 1, true) then pids[#pids + 1] = tonumber(name) end
  end
  return pids
end

local function kill_all(dir)   -- what a failing test left behind
  for _, pid in ipairs(procs_of(dir)) do host.kill(pid, 9) end
end

local function wait_for(fn, seconds)
  local t0 = host.clock()
  while host.clock() - t0 < seconds do
    local v = fn()
    if v then return v end
    host.sleep(0.1)
  end
end

local function tmp_files(dir)
  local found = {}
  for _, name in ipairs(require("dpy.paths").list(dir) or {}) do
    if name:find("%.tmp") then found[#found + 1] = name end
  end
  return found
end

-- Starts `dpy-lua run` of config_text in dir in the background (env: "NAME=VALUE " before it);
-- -> its pid and run directory. Its output goes to dir/run.out, its exit status to dir/code.
local function start_run(dir, config_text, env)
  write_file(dir .. "/c.lua", config_text)
  local out = dir .. "/out"
  write_file(dir .. "/bg.sh", string.format("%s%s run %s/c.lua --out %s >%s/run.out 2>&1 &\necho $! >%s/pid\n"
                                            .. "wait $!\necho $? >%s/code\n", env or "", BIN, dir, out, dir, dir, dir))
  os.execute("sh " .. dir .. "/bg.sh >/dev/null 2>&1 &")
  local pid = wait_for(function() return tonumber(read_file(dir .. "/pid") or "") end, 10)
  assert.truthy(pid, "the run did not start")
  return pid, out
end

-- Waits until every node of uids has finished round 1 (its metrics say so).
local function wait_round_1(out, uids)
  assert.truthy(wait_for(function()
    for _, uid in ipairs(uids) do
      local m = node_metrics(out, uid)
      if not (m and m.test_accuracy and #m.test_accuracy >= 1) then return false end
    end
    return true
  end, 60), "round 1 never reached the metrics")
end

local action = action_config

describe("stopping a run", function()
  it("kills a child that stopped answering after the grace period #e2e", function()
    local stop = action("stop", "pre_train", "if node.uid == 3 and r == 2 then host.kill(host.pid(), 19) end")
    local dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN .. "processes = 2\npeer_timeout = 60\nstop_grace = 3\n" .. stop)
    local t0 = host.clock()
    local code, _, err = sh("timeout -s KILL 50 " .. BIN .. " run " .. dir .. "/c.lua --out " .. dir .. "/out")
    local seconds = host.clock() - t0
    kill_all(dir)
    assert.are.equal(1, code, err)   -- not 137: the launcher itself came back
    assert.is_true(seconds < 40, string.format("took %.1f s", seconds))
    assert.matches("process 1 exited with 137", err)
    for uid = 0, 1 do   -- the survivors' results
      local m = node_metrics(dir .. "/out", uid)
      assert.truthy(m, "node " .. uid .. "'s metrics")
      assert.is_true(#m.test_accuracy >= 1)
    end
  end)

  it("ends a run at once when a process fails while its peers are still connecting #e2e", function()
    -- run B's process 1 is killed as it starts, so B's processes 0 and 2 wait for a peer that never
    -- comes: SIGTERM must end their wait, not SIGKILL, and not their 60 s connect timeout. (Run A
    -- holding B's ports did this before the launcher held them itself.) Executed, not forked, its
    -- processes take most of a second to load, so the kill below comes before they connect.
    local dir = tmpdir()
    write_file(dir .. "/b.lua", TINY_RUN .. "processes = 3\n")
    write_file(dir .. "/bg.sh", string.format("DPY_FORK=0 timeout -s KILL 60 %s run %s/b.lua --out %s/b -q >/dev/null "
                                              .. "2>%s/err; echo $? >%s/code\n", BIN, dir, dir, dir, dir))
    local t0 = host.clock()
    os.execute("sh " .. dir .. "/bg.sh &")
    local killed = wait_for(function()
      for _, pid in ipairs(procs_of(dir .. "/b")) do
        -- words apart by NUL bytes (executed) or by spaces (forked: spawn.c's title)
        if (read_file("/proc/" .. pid .. "/cmdline") or ""):find("[\0 ]%-%-process[\0 ]1[\0 ]") then
          host.kill(pid, 9)
          return true
        end
      end
    end, 30)
    local done = wait_for(function() return read_file(dir .. "/code") end, 60)
    local seconds = host.clock() - t0
    kill_all(dir)
    assert.truthy(killed, "process 1 never started")
    local err = read_file(dir .. "/err") or ""
    assert.are.equal("1", (done or ""):match("%d+"), err)
    assert.matches("process 1 exited with 137", err)
    -- still connecting, the others are sent SIGTERM; where the kill came after they connected (this
    -- test's poll slowed by a loaded machine), they stop by themselves, which is right too
    if not err:find("stopped when process 1 ended", 1, true) then assert.matches("exited with 143", err) end
    assert.not_matches("process [02] exited with 137", err)
    assert.is_true(seconds < 12, string.format("took %.1f s", seconds))
  end)

  for _, case in ipairs { { "SIGINT", 2, 130, 1 }, { "SIGTERM", 15, 143, 2 }, { "SIGINT", 2, 130, 2 },
                          { "SIGHUP", 1, 129, 2 } } do
    local name, signum, expected, processes = case[1], case[2], case[3], case[4]
    it(string.format("stops every node at once on %s, %d process(es)", name, processes), function()
      local dir = tmpdir()
      local pid, out = start_run(dir, TINY_RUN:gsub("rounds = 3", "rounds = 40") .. "processes = " .. processes .. "\n")
      wait_round_1(out, { 0, 1, 2, 3 })
      local t0 = host.clock()
      host.kill(pid, signum)
      local code = wait_for(function() return tonumber(read_file(dir .. "/code") or "") end, 30)
      local seconds = host.clock() - t0
      local left = procs_of(out)
      kill_all(out)
      assert.are.equal(expected, code, read_file(dir .. "/run.out"))
      assert.is_true(seconds < 15, string.format("stopped %.1f s after the signal", seconds))
      assert.are.same({}, left, "no dpy-lua process remains")
      local manifest = metrics.read(out .. "/manifest.json")
      assert.are.equal(name, manifest.interrupted and manifest.interrupted.signal)
      local r = manifest.interrupted.round
      assert.is_true(r >= 1 and r < 40, "round " .. tostring(r))
      for uid = 0, 3 do
        local m = node_metrics(out, uid)
        assert.is_true(#m.test_accuracy >= r and #m.test_accuracy < 40, "node " .. uid .. " kept its rounds")
      end
      assert.are.same({}, tmp_files(out))
      assert.matches("interrupted", read_file(dir .. "/run.out"))
      for uid = 0, 3 do   -- a node stopped is no node failed: its log says so, without a traceback
        local text = read_file(string.format("%s/%d.log", out, uid))
        assert.is_nil(text:find("failed:", 1, true), text)
        assert.is_nil(text:find("traceback", 1, true), text)
      end
    end)
  end

  it("leaves no temporary file when a second SIGTERM comes while another thread writes a file #e2e", function()
    -- the writing thread holds the signals, but one sent to the process goes to another thread
    -- (libtorch's), whose second-signal default ended the process between the write and the rename
    local dir = tmpdir()
    write_file(dir .. "/w.lua", [[
      local host = require "dpy.host.core"
      local tensor = require "dpy.tensor"
      local a = tensor.randn(300, 300)
      local _ = a:matmul(a)   -- libtorch's threads
      host.catch_interrupt()
      local data = string.rep("x", 50 * 1000 * 1000)
      io.stdout:write("ready\n")
      io.stdout:flush()
      while true do assert(host.write_atomic(arg[1] .. "/f.json", data)) end]])
    local left, codes = {}, {}
    for i = 1, 3 do
      local d = string.format("%s/d%d", dir, i)
      host.mkdir_p(d)
      local code = sh(string.format("%s %s/w.lua %s >%s/out 2>&1 & p=$!; "
                                    .. "until grep -q ready %s/out; do sleep 0.05; done; sleep 0.%d; "
                                    .. "kill -TERM $p; sleep 0.02; kill -TERM $p; wait $p",
                                    BIN, dir, d, d, d, 1 + 3 * (i - 1)))
      codes[i] = code
      for _, f in ipairs(tmp_files(d)) do left[#left + 1] = f end
    end
    assert.are.same({ 143, 143, 143 }, codes)
    assert.are.same({}, left)
  end)

  it("runs on under nohup: a SIGHUP it was started ignoring stays ignored, in its processes too #e2e", function()
    local dir = tmpdir()
    local pid, out = start_run(dir, TINY_RUN:gsub("rounds = 3", "rounds = 6") .. "processes = 2\n",
                               "trap '' HUP; ")
    wait_round_1(out, { 0, 1, 2, 3 })
    for _, p in ipairs(procs_of(out)) do host.kill(p, 1) end   -- the launcher and its processes, as a hang-up
    local code = wait_for(function() return tonumber(read_file(dir .. "/code") or "") end, 60)
    kill_all(out)
    assert.are.equal(0, code, read_file(dir .. "/run.out"))
    assert.are.equal(6, #node_metrics(out, 0).test_accuracy)
    assert.is_nil(metrics.read(out .. "/manifest.json").interrupted)
    assert.truthy(pid)
  end)

  it("stops as on Ctrl-C when the pipe its output goes to closes (SIGPIPE) #e2e", function()
    local dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN:gsub("rounds = 3", "rounds = 400") .. "processes = 2\nlocal_steps = 1\n")
    local out = dir .. "/out"
    -- the reader goes once every node has finished a round; the progress lines after it meet a closed pipe
    local code = sh(string.format("bash -c 'DPY_PROGRESS_SECONDS=0.5 timeout -s KILL 60 %s run %s/c.lua --out %s 2>&1 "
                                  .. "| grep -q \"^round [1-9]\"; exit ${PIPESTATUS[0]}'", BIN, dir, out))
    local left = procs_of(out)
    kill_all(out)
    assert.are.equal(141, code)
    assert.are.same({}, left, "no dpy-lua process remains")
    local manifest = metrics.read(out .. "/manifest.json")
    assert.are.equal("SIGPIPE", manifest.interrupted and manifest.interrupted.signal)
    assert.is_true(#node_metrics(out, 0).test_accuracy < 400)
    assert.matches("stopped by signal %d+ in round", read_file(out .. "/0.log"))   -- its process: SIGTERM
  end)

  it("stops on a full disk, says so once, and leaves what it wrote readable #e2e", function()
    local dir = tmpdir()
    local small = dir .. "/small"
    assert(host.mkdir_p(small))
    if sh("mount -t tmpfs -o size=160k tmpfs " .. small) ~= 0 then   -- the suite's setup runs as root
      pending("mounting a small tmpfs needs root")
      return
    end
    local ok, why = pcall(function()
      write_file(dir .. "/c.lua", TINY_RUN:gsub("nodes = 4", "nodes = 8"):gsub("rounds = 3", "rounds = 2000")
                                  .. "processes = 2\nlocal_steps = 1\n")
      local code, _, err = sh("timeout -s KILL 120 " .. BIN .. " run " .. dir .. "/c.lua --out " .. small .. "/out")
      local out = small .. "/out"
      assert.are.equal(1, code, err)
      assert.matches("No space left on device", err)
      local lines = select(2, err:gsub("dpy%-lua: ", ""))
      assert.is_true(lines <= 5, "a line per failure, not per node:\n" .. err)
      assert.not_matches("peer %d+ failed: round", err)   -- no failure nested in another
      assert.are.same({}, procs_of(out), "no dpy-lua process remains")
      assert.are.same({}, tmp_files(out))
      assert.truthy(metrics.read(out .. "/manifest.json"))
      local kept = 0
      for uid = 0, 7 do   -- every metrics file that was written reads whole
        if io.open(string.format("%s/%d.metrics.json", out, uid)) then
          kept = kept + 1
          assert.truthy(node_metrics(out, uid), "node " .. uid)
        end
      end
      assert.is_true(kept > 0, "no metrics were written before the disk was full")
    end)
    sh("umount -l " .. small)   -- lazily: a process that has just ended may still hold a file there
    assert(ok, why)
  end)

  -- A second Ctrl-C ends the launcher at once, as SIGKILL or the OOM killer would: its processes,
  -- forked or executed, go with it instead of running on unsupervised.
  for _, fork in ipairs { "1", "0" } do
    it("takes its processes with it when the launcher is killed, DPY_FORK=" .. fork, function()
      local pid, out = start_run(tmpdir(), TINY_RUN:gsub("rounds = 3", "rounds = 400") .. "processes = 2\n",
                                 "DPY_FORK=" .. fork .. " ")
      wait_round_1(out, { 3 })
      assert.are.equal(3, #procs_of(out), "the launcher and its two processes")
      host.kill(pid, 9)
      local gone = wait_for(function() return #procs_of(out) == 0 end, 15)
      local left = procs_of(out)
      kill_all(out)
      assert.truthy(gone, #left .. " dpy-lua process(es) left running")
    end)
  end

  for _, case in ipairs { { "SIGINT", 2, 130 }, { "SIGTERM", 15, 143 } } do
    local name, signum, expected = case[1], case[2], case[3]
    it("stops a centralized run on " .. name .. ", marking the manifest", function()
      local dir = tmpdir()
      local pid, out = start_run(dir, "seed = 3\nbatch_size = 16\nepochs = 1000\neval_every = 5\n"
                                      .. "train_samples = 2000\ntest_samples = 100\n")
      wait_round_1(out, { 0 })
      local t0 = host.clock()
      host.kill(pid, signum)
      local code = wait_for(function() return tonumber(read_file(dir .. "/code") or "") end, 30)
      local seconds = host.clock() - t0
      kill_all(out)
      assert.are.equal(expected, code, read_file(dir .. "/run.out"))
      assert.is_true(seconds < 15, string.format("stopped %.1f s after the signal", seconds))
      local manifest = metrics.read(out .. "/manifest.json")
      assert.are.equal(name, manifest.interrupted and manifest.interrupted.signal)
      local r = manifest.interrupted.round
      assert.is_true(r >= 1 and r <= #node_metrics(out, 0).test_accuracy, "round " .. tostring(r))
      assert.are.same({}, tmp_files(out))
      assert.matches("interrupted by " .. name, read_file(dir .. "/run.out"))
    end)
  end
end)
