-- dpy-lua attach: a prompt on a live node of a running experiment (dpy.attach.*, host/core/attach.c).
-- The runs start with --paused, so that every step below happens at a known round.
local host = require "dpy.host.core"
local metrics = require "dpy.metrics"
local tensor = require "dpy.tensor"

local CONFIG = "seed = 3\nnodes = 8\ngraph = 'ring'\nrounds = 5\nlocal_steps = 2\nbatch_size = 16\n"
               .. "train_samples = 2000\ntest_samples = 200\neval_every = 1\npeer_timeout = 30\n"

local started = {}   -- the runs started here: one a failed test left paused is stopped after it

-- Stops the runs a failed test left paused (nothing left running).
local function stop_started()
  for _, pid in ipairs(started) do
    local ok, code = pcall(host.wait, pid, true)   -- not ours any more once waited for
    if ok and code == nil then
      host.kill(pid, 15)   -- a paused run stops at SIGTERM like any other, its processes with it
      pcall(wait_exit, pid, 30)
    end
  end
  started = {}
end

-- Starts config_text with --paused in the background; -> the run directory, its pid, its output file.
-- opts: env (a list of NAME=VALUE for the run), ssh (the command the client reaches other hosts by)
local function start_paused(config_text, extra, dir, opts)
  opts = opts or {}
  dir = dir or tmpdir()
  write_file(dir .. "/c.lua", config_text)
  local out = dir .. "/out"
  local argv = { "/usr/bin/env" }
  for _, v in ipairs(opts.env or {}) do argv[#argv + 1] = v end
  for _, w in ipairs { DPY_BIN, "run", dir .. "/c.lua", "--out", out, "--paused", "-q" } do argv[#argv + 1] = w end
  for w in (extra or ""):gmatch("%S+") do argv[#argv + 1] = w end
  local pid = assert(host.spawn(argv, dir .. "/run.out"))
  started[#started + 1] = pid
  local client
  for _ = 1, 600 do   -- every process listening
    client = require("dpy.attach.client").open(out, { ssh = opts.ssh })
    if client then break end
    host.sleep(0.1)
  end
  assert(client, "the run's processes never listened: " .. tostring(read_file(dir .. "/run.out")))
  wait_paused(client)   -- every node at its first boundary
  client:close()
  return out, pid, dir .. "/run.out"
end

-- Types lines into dpy-lua attach out --uid uid through a pipe; -> exit code, stdout, stderr.
local function attach(out, uid, lines, extra)
  local input = os.tmpname()
  write_file(input, table.concat(lines, "\n") .. "\n")
  local code, o, e = sh(string.format("timeout 120 %s attach %s --uid %d %s < %s", shell_quote(DPY_BIN), out, uid,
                                      extra or "", input))
  os.remove(input)
  return code, o, e
end

local function rounds_recorded(out, uid)
  local m = metrics.read(string.format("%s/%d.metrics.json", out, uid))
  return m and m.metrics.train_loss and #m.metrics.train_loss or 0
end

describe("dpy-lua attach #e2e", function()
  after_each(stop_started)

  it("looks inside a node of a run in two processes, pauses, steps, changes one node and resumes", function()
    local out, pid, log = start_paused(CONFIG, "processes=2")
    -- the first session: where the nodes are, one round, then detach (the run stays paused)
    local code, o, e = attach(out, 5, { "nodes()", "step(1)", "round", "metrics:last('test_accuracy')" })
    assert.are.equal(0, code, e)
    assert.matches("attached to node 5", o)
    assert.matches("  5            0  paused      1", o, 1, true)   -- node 5 lives in process 1
    assert.matches("paused: every node has finished round 1", o, 1, true)
    local acc = o:match("\n1\t(0%.%d+)\n")
    assert.truthy(acc, o)
    assert.matches("detached; the run goes on (paused)", o, 1, true)
    -- paused: no node's round counter moves
    local before = {}
    for u = 0, 7 do before[u] = rounds_recorded(out, u) end
    host.sleep(1.5)
    for u = 0, 7 do
      assert.are.equal(1, before[u], "node " .. u)
      assert.are.equal(1, rounds_recorded(out, u), "node " .. u .. " moved while paused")
    end
    -- the second session: node 5's learning rate, two rounds, then resume
    code, o, e = attach(out, 5, { "optimizer:set_lr(0.05)", "optimizer", "use(4)", "optimizer", "use(5)",
                                  "step(2)", "nodes()", "optimizer", "resume()" })
    assert.are.equal(0, code, e)
    assert.matches("the run is paused, after round 1", o, 1, true)
    local lrs = {}
    for lr in o:gmatch("lr=([%d.]+)") do lrs[#lrs + 1] = lr end
    assert.are.same({ "0.05", "0.01", "0.05" }, lrs)   -- node 5, node 4, node 5 again after two rounds
    assert.matches("paused: every node has finished round 3", o, 1, true)
    for u = 0, 7 do assert.matches(string.format("\n%3d            3  paused ", u), o, 1, true) end
    assert.matches("running", o)
    assert.are.equal(0, wait_exit(pid), read_file(log))
    assert.matches("chunk(s) of code were run on nodes by dpy-lua attach", read_file(log), 1, true)
    -- the change is in node 5's log and in the manifest, and nowhere else
    assert.matches("attach: round 1: optimizer:set_lr(0.05)", read_file(out .. "/5.log"), 1, true)
    assert.is_nil(read_file(out .. "/4.log"):find("set_lr", 1, true))
    local manifest = metrics.read(out .. "/manifest.json")
    local changes = {}
    for _, c in ipairs(manifest.attached) do changes[#changes + 1] = string.format("%d:%s", c.uid, c.code) end
    assert.are.same({ "5:round", "5:metrics:last('test_accuracy')", "5:optimizer:set_lr(0.05)", "5:optimizer",
                      "4:optimizer", "5:optimizer" }, changes)
    assert.are.equal(5, rounds_recorded(out, 0))
    -- the sockets are gone with the run
    assert.is_nil(io.open(out .. "/attach/p0.sock"))
    assert.is_nil(io.open(out .. "/attach/p1.sock"))
  end)

  -- Waits until node 0 of run out evaluates a client's code (for at most 10 s).
  local function wait_evaluating(out)
    local client = assert(require("dpy.attach.client").open(out))
    local state
    for _ = 1, 100 do
      state = client:node_list()[1].state
      if state == "evaluating" then break end
      host.sleep(0.1)
    end
    client:close()
    assert.are.equal("evaluating", state)
  end

  -- Sends code to node 0 of a paused run, closes the client while the node evaluates (killed, or
  -- its ssh gone: no interrupt comes), resumes the run: it must end within peer_timeout (30 s), node
  -- 0 not left looping, its peers waiting for it.
  -- With resume_first, the code is run and answered at the paused boundary, the run resumed, and
  -- the client closed once node 0 evaluates something of its (a breakpoint's function).
  local function client_gone_while(code, resume_first)
    local out, pid, log = start_paused(CONFIG, "processes=2")
    local c = assert(require("dpy.attach.core").connect(out .. "/attach/p0.sock"))
    assert(c:send("E", 0, 1, code))
    if resume_first then
      local kind, _, _, text = c:recv(30)
      assert.are.equal("R", kind, text)
      local client = assert(require("dpy.attach.client").open(out))
      client:resume()
      client:close()
    end
    wait_evaluating(out)
    c:close()
    if not resume_first then
      local rc, o, e = attach(out, 4, { "resume()" })
      assert.are.equal(0, rc, e)
      assert.matches("running", o)
    end
    assert.are.equal(0, wait_exit(pid, 25), read_file(log))
    assert.are.equal(5, rounds_recorded(out, 0))
  end

  it("interrupts the code of a client that went away while it ran: the run goes on", function()
    client_gone_while("while true do end")
  end)

  it("interrupts the showing of a value whose __tostring loops, once its client went away", function()
    -- the code returns at once; showing its value runs the client's __tostring, which loops
    client_gone_while("setmetatable({}, { __tostring = function() while true do end end })")
  end)

  it("interrupts a breakpoint's function that loops, once its client went away", function()
    client_gone_while("break_on('post_train', function() while true do end end)", true)
  end)

  it("interrupts a breakpoint's function that loops at the client's Ctrl-C while it waits: the run pauses",
     function()
    local out, pid, log = start_paused(CONFIG)
    local dir = tmpdir()
    write_file(dir .. "/in", "break_on('post_train', function(n) while n.uid == 0 and n.round == 1 do end end)\n"
                             .. "resume()\nwait()\nwait()\nnodes()\nresume()\n")
    local client_pid = assert(host.spawn({ "/bin/sh", "-c", string.format("exec %s attach %s --uid 0 < %s/in",
                                                                          shell_quote(DPY_BIN), out, dir) },
                                         dir .. "/client.out"))
    wait_evaluating(out)
    host.sleep(0.5)   -- the client in its wait()
    host.kill(client_pid, 2)
    assert.are.equal(0, wait_exit(client_pid, 60), read_file(dir .. "/client.out"))
    local o = read_file(dir .. "/client.out")
    assert.matches("break: node 0, round 1, post_train: break_on failed: [%w:]*%s?interrupted\n", o)
    assert.matches("paused: every node has finished round %d", o)
    assert.are.equal(0, wait_exit(pid, 60), read_file(log))
    assert.are.equal(5, rounds_recorded(out, 0))
  end)

  it("gives a client's code at the first round its node's own model, not the copy the nodes share", function()
    local out = start_paused(CONFIG, "processes=1")
    local code, o, e = attach(out, 5, { "model:get_flat():sum():item()", "trainer:run(1)", "use(4)",
                                        "model:get_flat():sum():item()", "print('hi', 1, nil, {})", "detach()" })
    assert.are.equal(0, code, e)
    assert.matches("\nhi\t1\tnil\ttable: 0x%x+\n", o)   -- as Lua's print, and the local REPL's, show them
    local sums = {}
    for line in o:gmatch("[^\n]+") do
      if tonumber(line) then sums[#sums + 1] = line end
    end
    assert.are.equal(3, #sums, o)   -- node 5's model, its training loss, node 4's model
    assert.are.equal(sums[1], sums[3], o)
  end)

  it("adds an action to a running node: a built-in one the config did not name, or a user's file", function()
    local out, pid, log = start_paused(CONFIG)
    local file = tmpdir() .. "/hello.lua"
    write_file(file, [[
      return require("dpy.registry").register { kind = "action", name = "hello",
        new = function() return { post_train = function(node, r) node.log:write("hello at round %d", r) end } end }]])
    local code, o, e = attach(out, 3, { 'add_action{ "model_norm", bogus = 1 }',
                                        'add_action{ "model_norm" }', 'add_action{ "' .. file .. '" }',
                                        'add_action{ "modelnorm" }', 'add_action{ "label_flipping", nodes = { 4 } }',
                                        'add_action{ "differential_privacy", mode = "local" }',
                                        "step(1)", "wait()", "resume()", "wait()" })
    assert.are.equal(0, code, e)
    -- wait() on a run paused already (by the step) says so at once
    local _, paused = o:gsub("paused: every node has finished round 1\n", "")
    assert.are.equal(2, paused, o)
    assert.matches('\n"model_norm"\n', o, 1, true)
    assert.matches('\n"hello"\n', o, 1, true)
    assert.matches("add_action: no action named 'modelnorm' (did you mean 'model_norm'?)", o, 1, true)
    assert.matches("unknown option 'bogus'; model_norm takes no options\n", o, 1, true)
    -- an action that replaces a component (label_flipping: the training set) goes in the config
    assert.matches("add_action: label_flipping: .*train_set.*in the config", o)   -- even on a node it spares
    assert.matches("add_action: differential_privacy: .*trainer.*in the config", o)
    local _, ended = o:gsub("the run has ended", "")
    assert.are.equal(1, ended, o)   -- wait()'s answer, not said again on leaving
    assert.are.equal(0, wait_exit(pid), read_file(log))
    -- added before round 1 (the run paused after round 0): every round, on node 3 alone
    assert.matches("hello at round 1", read_file(out .. "/3.log"), 1, true)
    assert.is_nil(read_file(out .. "/4.log"):find("hello at", 1, true))
    local norms = node_metrics(out, 3).model_norm
    assert.are.same({ 1, 5 }, { norms[1][1], #norms })
    assert.is_nil(node_metrics(out, 4).model_norm)
  end)

  it("costs nothing when it only looks: paused, stepped, watched and resumed, the results are bit-identical", function()
    local code, _, err, plain = run_config(CONFIG)
    assert.are.equal(0, code, err)
    local out, pid, log = start_paused(CONFIG)
    local o, e
    code, o, e = attach(out, 2, { "watch('test_accuracy')",
                                  "break_on('post_exchange', function(n) return n.round == 2 end)",
                                  "resume()", "wait()", "clear_breaks()", "step(1)",
                                  "received[1] ~= nil and received[3] ~= nil", "resume()" })
    assert.are.equal(0, code, e)
    assert.matches("node 2 round 1 test_accuracy 0%.%d+", o)
    assert.matches("\nwatching test_accuracy\n", o, 1, true)   -- a line, not a quoted string
    assert.matches("break: node 2, round 2, post_exchange: break", o, 1, true)
    -- the break pauses the run at the next boundary every node can reach: round 2, or 3 for the
    -- nodes that had started it
    local at = tonumber(o:match("paused: every node has finished round (%d)"))
    assert.truthy(at == 2 or at == 3, o)
    assert.matches("paused: every node has finished round " .. at + 1, o, 1, true)   -- then one step
    assert.matches("\ntrue\n", o, 1, true)   -- what node 2 received from its ring neighbours this round
    assert.are.equal(0, wait_exit(pid), read_file(log))
    for u = 0, 7 do
      local _, a = tensor.unpickle(assert(read_file(string.format("%s/%d.model.pt", plain, u))))
      local _, b = tensor.unpickle(assert(read_file(string.format("%s/%d.model.pt", out, u))))
      for i = 1, #a do assert.is_true(a[i]:eq(b[i]):all():item(), "node " .. u .. " tensor " .. i) end
      local ma, mb = node_metrics(plain, u), node_metrics(out, u)
      assert.are.same(ma.test_accuracy, mb.test_accuracy)
      assert.are.same(ma.train_loss, mb.train_loss)
    end
  end)

  it("takes typing at a terminal: a node chosen from a list, Tab completion of the node's names, multi-line "
     .. "input, Ctrl-C of an endless loop, values printed as they come", function()
    if sh("command -v tmux") ~= 0 then pending("tmux is not installed") return end
    local out, pid, log = start_paused((CONFIG:gsub("nodes = 8", "nodes = 4")), "processes=2")
    local session = "dpy_attach_" .. host.pid()
    local screen = tmpdir() .. "/screen"
    local function keys(...)   -- each line typed, then Enter (-l: "end" is text, not the End key)
      for i = 1, select("#", ...) do
        local line = select(i, ...)
        if line == "C-c" or line == "Tab" then
          assert(sh("tmux send-keys -t " .. session .. " " .. line) == 0)
        elseif line:sub(-1) == "\t" then   -- typed without Enter, then Tab
          assert(sh("tmux send-keys -t " .. session .. " -l " .. shell_quote(line:sub(1, -2))) == 0)
          assert(sh("tmux send-keys -t " .. session .. " Tab") == 0)
          host.sleep(0.3)
        else
          assert(sh("tmux send-keys -t " .. session .. " -l " .. shell_quote(line)) == 0)
          assert(sh("tmux send-keys -t " .. session .. " Enter") == 0)
        end
      end
    end
    local function wait_for(text)
      local shown
      for _ = 1, 300 do
        sh(string.format("tmux capture-pane -p -S -200 -t %s > %s", session, screen))
        shown = read_file(screen) or ""
        if shown:find(text, 1, true) then return shown end
        host.sleep(0.1)
      end
      error("the screen never showed " .. text .. ":\n" .. shown)
    end
    assert(sh(string.format("tmux new-session -d -s %s -x 160 -y 50 %s", session,
                            shell_quote(string.format("HOME=%s %s attach %s; sleep 60", tmpdir(),
                                                      shell_quote(DPY_BIN), out)))) == 0)
    local ok, why = pcall(function()
      wait_for("node?")   -- no --uid: the nodes, to choose from
      wait_for("  1            0  paused      0")
      keys("1")
      wait_for("attached to node 1")
      keys("round * 10")
      wait_for("\n0\n")
      keys("for i = 1, 2 do", "print('line', i)", "end")
      wait_for("line    2")   -- the tab, as the terminal shows it
      keys("while true do end")
      host.sleep(1)
      keys("C-c")
      wait_for("interrupted")
      -- Tab: the node's own names (a session global, a node object's methods), as the node has them
      keys("optimi\t", ":set_l\t", "(0.05)")
      wait_for("node 1> optimizer:set_lr(0.05)")
      keys("wat\t", "('train_loss')")
      wait_for("node 1> watch('train_loss')")
      wait_for("watching train_loss")
      keys("resume()")
      wait_for("node 1 round 5 train_loss")
      wait_for("the run has ended")
    end)
    sh("tmux kill-session -t " .. session)
    assert(ok, why)
    assert.are.equal(0, wait_exit(pid), read_file(log))
  end)

  it("says what is wrong: no run, a run that has ended, no such node, no --uid from a pipe", function()
    local dir = tmpdir()
    local code, _, e = sh(shell_quote(DPY_BIN) .. " attach " .. dir)
    assert.are.equal(1, code)
    assert.matches("is not a run directory (no manifest.json)", e, 1, true)
    write_file(dir .. "/manifest.json", '{"nodes": 1, "seed": 1}')   -- as a centralized run writes it
    code, _, e = sh(shell_quote(DPY_BIN) .. " attach " .. dir)
    assert.are.equal(1, code)
    assert.matches("is a centralized run: it has no nodes to attach to", e, 1, true)
    local c, _, err, out = run_config(TINY_RUN)
    assert.are.equal(0, c, err)
    code, _, e = sh(shell_quote(DPY_BIN) .. " attach " .. out .. " --uid 0")
    assert.are.equal(1, code)
    assert.matches("process 0 of .* does not answer", e)
    -- a node the run never had is a usage error, ended run or not (it said "the run has ended", exit 1)
    code, _, e = sh(shell_quote(DPY_BIN) .. " attach " .. out .. " --uid 30")
    assert.are.equal(2, code, e)
    assert.matches("--uid 30: no such node in .* %(nodes 0%-%d+%)", e)
    local live, pid = start_paused(TINY_RUN)
    -- two clients at once, each on its own node
    local client = require "dpy.attach.client"
    local a, b = assert(client.open(live)), assert(client.open(live))
    a.uid, b.uid = 1, 2
    assert.are.same({ true, "1" }, { a:eval("node.uid") })
    assert.are.same({ true, "2" }, { b:eval("node.uid") })
    assert.are.same({ false, "attach:1: boom" }, { b:eval("error('boom')") })
    for _, conn in ipairs(a.conns) do conn:close() end
    for _, conn in ipairs(b.conns) do conn:close() end
    code, _, e = attach(live, 9, {})
    assert.are.equal(2, code)
    assert.matches("--uid 9: no such node", e, 1, true)
    code, _, e = sh(string.format("%s attach %s < /dev/null", shell_quote(DPY_BIN), live))
    assert.are.equal(2, code)
    assert.matches("--uid U: which node", e, 1, true)
    -- the socket is the user's alone; a paused run stops at Ctrl-C like any other, its socket removed
    local mode = io.popen("stat -c %a " .. live .. "/attach/p0.sock"):read("l")
    assert.are.equal("600", mode)
    assert.are.equal("700", io.popen("stat -c %a " .. live .. "/attach"):read("l"))
    host.kill(pid, 2)
    assert.are.equal(130, wait_exit(pid))
    assert.is_nil(io.open(live .. "/attach/p0.sock"))
  end)

  it("says so when every session of a process is taken, not that the run has ended", function()
    local live, pid = start_paused(TINY_RUN)
    local held = {}
    for i = 1, 32 do held[i] = assert(require("dpy.attach.core").connect(live .. "/attach/p0.sock")) end
    for _ = 1, 5 do   -- the refusal read whether it comes before the client's first request or after
      local client, err = require("dpy.attach.client").open(live)
      assert.is_nil(client)
      assert.matches("process 0 of " .. live .. " refused the session: all 32 sessions are taken", err, 1, true)
    end
    for _, c in ipairs(held) do c:close() end
    host.sleep(0.5)
    local code, o, e = attach(live, 0, { "resume()" })
    assert.are.equal(0, code, e)
    assert.matches("running", o)
    assert.are.equal(0, wait_exit(pid))
  end)

  -- each send gave up after 5 s without progress, but a frame had no deadline of its own: a client
  -- reading a 1 MB reply 4 KB at a time held its node (and so the run) for minutes
  it("closes the session of a client that reads a reply too slowly, saying so in the node's log", function()
    local live, pid = start_paused(TINY_RUN, nil, nil, { env = { "DPY_ATTACH_FRAME_SECONDS=2" } })
    local c = assert(require("socket.unix").stream())
    assert(c:connect(live .. "/attach/p0.sock"))
    local code = "return string.rep('x', 1000000)"
    assert(c:send(string.pack(">I4", #code) .. "E" .. string.pack(">I4>I4", 0, 1) .. code))
    c:settimeout(1)
    local got, t0, said = 0, host.clock(), nil
    while not said and host.clock() - t0 < 20 do
      local data, err, partial = c:receive(4096)
      got = got + #(data or partial or "")
      if err == "closed" then break end
      host.sleep(0.5)
      said = (read_file(live .. "/0.log") or ""):match("attach: session %d+ closed: [^\n]*")
    end
    local seconds = host.clock() - t0
    c:close()
    assert.matches("its client did not read a reply of %d+ bytes within 2 s", said or "(nothing said)")
    assert.is_true(seconds < 10, string.format("%.1f s", seconds))
    assert.is_true(got < 1000000, got .. " bytes")
    local status, o, e = attach(live, 0, { "round", "resume()" })   -- the node serves the next client
    assert.are.equal(0, status, e)
    assert.matches("0", o)
    assert.are.equal(0, wait_exit(pid))
  end)

  -- the nodes' replies to one client go out one at a time: each node whose turn came after the
  -- first's frame timed out waited its own full deadline on a session already closed
  it("frees every node waiting to reply to a client too slow, once the first reply times out", function()
    local live, pid = start_paused(TINY_RUN, nil, nil, { env = { "DPY_ATTACH_FRAME_SECONDS=2" } })
    local c = assert(require("socket.unix").stream())
    assert(c:connect(live .. "/attach/p0.sock"))
    local code = "return string.rep('x', 1000000)"
    for uid = 0, 3 do
      assert(c:send(string.pack(">I4", #code) .. "E" .. string.pack(">I4>I4", uid, uid + 1) .. code))
    end
    -- read nothing: each node serves another client (all four at once) once its reply is given up
    local input = os.tmpname()
    write_file(input, "round\n")
    local cmds = {}
    for uid = 0, 3 do
      cmds[#cmds + 1] = string.format("timeout 60 %s attach %s --uid %d < %s > %s.%d 2>&1 &", shell_quote(DPY_BIN),
                                      live, uid, input, input, uid)
    end
    sh(table.concat(cmds, " ") .. " wait")
    for uid = 0, 3 do
      assert.matches("0", read_file(input .. "." .. uid) or "")
      os.remove(input .. "." .. uid)
    end
    os.remove(input)
    c:close()
    local status, _, e = attach(live, 0, { "resume()" })
    assert.are.equal(0, status, e)
    assert.are.equal(0, wait_exit(pid))
    -- one reply timed out; the others, behind it, were given up without a wait of their own
    local timed_out = 0
    for uid = 0, 3 do
      if (read_file(string.format("%s/%d.log", live, uid)) or ""):find("did not read a reply", 1, true) then
        timed_out = timed_out + 1
      end
    end
    assert.are.equal(1, timed_out)
  end)

  it("reaches a run whose directory is too long for a socket address, through a link", function()
    local deep = tmpdir() .. "/" .. string.rep("d", 60) .. "/" .. string.rep("e", 60)
    assert(host.mkdir_p(deep))
    local out, pid = start_paused(TINY_RUN, nil, deep)
    assert.is_true(#(out .. "/attach/p0.sock") > 108)
    local target = io.popen("readlink " .. out .. "/attach/p0.sock"):read("l")
    assert.matches("^/tmp/dpy%-attach%-%d+/", target)
    local code, o, e = attach(out, 0, { "nodes()", "resume()" })
    assert.are.equal(0, code, e)
    assert.matches("  0            0  paused      0", o, 1, true)
    assert.are.equal(0, wait_exit(pid))
    assert.is_nil(io.open(target))
  end)
end)

describe("dpy.attach.node", function()
  -- a node without a run: an endpoint that records what it is asked, clients 1 and 3 gone
  local function fake_node(gone)
    local node = { uid = 4, round = 2, attach_sessions = { [1] = {}, [2] = {}, [3] = {} }, sent = {}, held = {} }
    node.endpoint = {
      attach_poll = function() end,
      attach_hold = function(_, conn) node.held[#node.held + 1] = conn end,
      attach_send = function(_, conn, kind) node.sent[#node.sent + 1] = kind .. conn; return not gone[conn] end,
      attach_eval = function(_, _, _, fn, ...) return pcall(fn, ...) end,
    }
    return node
  end

  it("a client gone does not make the node skip the next client's breakpoint or watch", function()
    local node = fake_node { [1] = true, [3] = true }
    local yes = function() return true end
    node.attach_breaks = { post_train = { { conn = 1, fn = yes }, { conn = 2, fn = yes }, { conn = 3, fn = yes } } }
    require("dpy.attach.node").event(node, "post_train")
    assert.are.same({ 1, 2, 3 }, node.held)
    assert.are.same({ { conn = 2, fn = yes } }, node.attach_breaks.post_train)

    node = fake_node { [1] = true }
    node.metrics = { last = function() return 2, 0.5 end }
    node.attach_watches = { { conn = 1, key = "a" }, { conn = 2, key = "a" } }
    require("dpy.attach.node").after_round(node, 2)
    assert.are.same({ "W1", "W2" }, node.sent)
  end)

  it("a value of the client's that cannot be shown is its error: the node does not fail", function()
    -- a node whose endpoint runs code as attach_eval does (pcall) and keeps each reply
    local replies = {}
    local node = { uid = 4, round = 2, dir = tmpdir(), log = { write = function() end } }
    node.endpoint = {
      attach_eval = function(_, _, _, fn, ...) return pcall(fn, ...) end,
      attach_send = function(_, _, kind, _, text) replies[#replies + 1] = kind .. " " .. text; return true end,
      attach_hold = function() end,
    }
    local serve = require("dpy.attach.node").serve
    local bad = "setmetatable({}, { __tostring = function() error('no show') end })"
    serve(node, 1, 1, "error(" .. bad .. ")", "E")
    serve(node, 1, 2, "return " .. bad, "E")
    serve(node, 1, 3, "return setmetatable({}, { __tostring = function() return {} end })", "E")
    serve(node, 1, 4, "t = setmetatable({}, { __pairs = function() error('no pairs') end })", "E")
    serve(node, 1, 5, "t.", "C")
    serve(node, 1, 6, "1 + 1", "E")
    replies[3] = replies[3]:gsub(" %S*pretty%.lua:%d+:", "")   -- where tostring raised
    assert.are.same({ "X (a table that tostring cannot show)",
                      "X the result cannot be shown: attach:1: no show",
                      "X the result cannot be shown: '__tostring' must return a string",
                      "R ", "C ", "R 2" }, replies)
    -- a breakpoint whose function fails so: the break is said, the node goes on
    node.attach_breaks = { post_train = { { conn = 1, fn = function() error(load("return " .. bad)()) end } } }
    require("dpy.attach.node").event(node, "post_train")
    assert.are.equal("B node 4, round 2, post_train: break_on failed: (a table that tostring cannot show)", replies[7])
  end)
end)

describe("dpy.attach.core's line editor, from a pipe", function()
  it("drops a line too long for it, says so, and reads the next", function()
    local dir = tmpdir()
    write_file(dir .. "/ed.lua", [[
      local core = require "dpy.attach.core"
      core.editor_open(nil)
      for _ = 1, 200 do
        core.wait({}, 1, true)
        local line = core.editor_line()
        if line == false then break end
        if line then print(#line, line) end
      end
      core.editor_close()
    ]])
    write_file(dir .. "/in", string.rep("x", 70000) .. "\nreturn 1 + 1\n" .. string.rep("y", 65536) .. "\nz\n")
    local code, out, err = sh(string.format("timeout 20 %s %s/ed.lua < %s/in", shell_quote(DPY_BIN), dir, dir))
    assert.are.equal(0, code, err)
    assert.are.equal("12\treturn 1 + 1\n1\tz\n", out)
    assert.matches("an input line longer than 65535 bytes, dropped", err, 1, true)
  end)
end)

-- A rank of mpirun or Slurm on another host shares the run directory but not its sockets: the
-- client reaches it through ssh, here the test OpenSSH server on loopback (tests/ssh/sshd), the
-- processes saying they run on "127.0.0.1" (DPY_ATTACH_HOST), a name that is not this host's.
describe("dpy-lua attach to processes on another host #e2e", function()
  local keys, ssh
  after_each(stop_started)
  setup(function()
    keys = tmpdir() .. "/keys"
    local port = start_sshd(keys)
    ssh = string.format("ssh -p %d -i %s -o UserKnownHostsFile=%s", port, keys .. "/user_key", keys .. "/known_hosts")
  end)
  teardown(function() stop_sshd(keys) end)

  it("pauses, steps and changes a run whose processes say they run elsewhere, through ssh", function()
    local out, pid, log = start_paused(CONFIG, "processes=2", nil, { env = { "DPY_ATTACH_HOST=127.0.0.1" }, ssh = ssh })
    for p = 0, 1 do
      local where = metrics.read(string.format("%s/attach/p%d.host", out, p))
      assert.are.equal("127.0.0.1", where.host)
      assert.are.equal(out .. "/attach/p" .. p .. ".sock", where.socket)
    end
    -- without a way in, the client names the host and what ssh said
    local code, _, e = attach(out, 5, { "round" }, "--ssh false")
    assert.are.equal(1, code)
    assert.matches("process 0 of .* runs on 127.0.0.1: false '127.0.0.1' exited with 1", e)
    local o
    code, o, e = attach(out, 5, { "nodes()", "step(1)", "round", "optimizer:set_lr(0.02)", "resume()" },
                        "--ssh " .. shell_quote(ssh))
    assert.are.equal(0, code, e)
    assert.matches("  5            0  paused      1", o, 1, true)
    assert.matches("paused: every node has finished round 1", o, 1, true)
    assert.matches("\n1\n", o)
    assert.are.equal(0, wait_exit(pid, 120), read_file(log))
    assert.matches("attach: round 1: optimizer:set_lr(0.02)", read_file(out .. "/5.log"), 1, true)
    assert.is_nil(io.open(out .. "/attach/p1.host"), "a process that ends takes its address with it")
    local _, left = sh("ls -d /tmp/dpy-attach-forward.* 2>/dev/null; pgrep -af 'ssh -p' | grep -v pgrep || true")
    assert.are.equal("", left, "the forwards and their folder end with the client")
  end)
end)
