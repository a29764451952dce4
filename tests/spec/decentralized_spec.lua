-- Decentralized runs end to end, through the dpy-lua binary: every process layout gives the same
-- numbers, byte counts, the algorithms, and peers that fail under both policies.
local BIN = shell_quote(DPY_BIN)
local TINY, run = TINY_RUN, run_config

local action_file = action_config

describe("decentralized runs", function()
  it("give bit-identical results in every process layout #e2e", function()
    local results = {}
    for _, p in ipairs { 1, 2, 4 } do
      local code, stdout, err, out = run(TINY, "processes=" .. p)
      assert.are.equal(0, code, err)
      assert.matches("4 nodes %(dpsgd, " .. p .. " process", stdout)
      results[p] = out
    end
    for uid = 0, 3 do
      local a = node_metrics(results[1], uid)
      for _, p in ipairs { 2, 4 } do
        local b = node_metrics(results[p], uid)
        assert.are.same(a.train_loss, b.train_loss)
        assert.are.same(a.test_accuracy, b.test_accuracy)
      end
    end
  end)

  it("forks its processes, libraries loaded: a fraction of the CPU of executing them, the same numbers #e2e", function()
    -- bash's time: the CPU of the launcher and its 4 processes, waited for; DPY_FORK=0 executes them.
    -- The whole training set: its partition, 60,000 labels, would start libgomp's threads
    local function timed(env)
      local dir = tmpdir()
      write_file(dir .. "/c.lua", TINY:gsub("train_samples = %d+\n", "") .. "rounds = 1\nprocesses = 4\n")
      local code, _, err = sh(string.format(
        "%s bash -c 'TIMEFORMAT=\"cpu %%U %%S\"; time %s run %s/c.lua --out %s/out -q'",
        env, BIN, dir, dir))
      assert.are.equal(0, code, err)
      local user, sys = err:match("cpu ([%d.]+) ([%d.]+)")
      return tonumber(user) + tonumber(sys), dir .. "/out"
    end
    local exec_cpu, exec_out = timed("DPY_FORK=0")
    local fork_cpu, fork_out = timed("")
    assert.is_true(fork_cpu < 0.6 * exec_cpu, string.format("forked %.2f s of CPU, executed %.2f", fork_cpu, exec_cpu))
    for uid = 0, 3 do
      assert.are.equal(read_file(string.format("%s/%d.model.pt", exec_out, uid)),
                       read_file(string.format("%s/%d.model.pt", fork_out, uid)))
      assert.are.same(node_metrics(exec_out, uid).train_loss, node_metrics(fork_out, uid).train_loss)
    end
  end)

  it("records per-round metrics and exact byte counts", function()
    local code, _, err, out = run(TINY)
    assert.are.equal(0, code, err)
    local m = node_metrics(out, 1)
    for _, name in ipairs { "train_loss", "test_loss", "test_accuracy", "bytes_sent", "bytes_received",
                            "train_seconds", "exchange_seconds", "wall_seconds", "step" } do
      assert.are.equal(3, #m[name], name)
    end
    assert.are.same({ 3, 9 }, m.step[3])   -- its local steps so far: 3 rounds of 3 (dpy-lua report draws them)
    -- a ring: two neighbours, the cnn's 215,370 float32 values plus a 40-byte header each
    local per_round = 2 * (215370 * 4 + 40)
    assert.are.same({ 1, per_round }, m.bytes_sent[1])
    assert.are.same({ 3, per_round }, m.bytes_received[3])
    assert.matches('"adj"', read_file(out .. "/graph.json"))
    assert.matches("round 3: test loss", read_file(out .. "/1.log"))
  end)

  -- The kernel's word for each process that hosts nodes: /proc/self/status's THP_enabled, in a
  -- node's build (its init event: 4 KiB pages while the process's nodes start, heap.c) and at its
  -- end (every node of the process built: huge pages unless huge_pages = false).
  it("takes huge pages in every node process once its nodes are built, unless huge_pages = false #e2e", function()
    if not read_file("/proc/self/status"):find("THP_enabled:", 1, true) then
      pending("this kernel reports no THP_enabled") return
    end
    local probe = action_config("thp", { init = "thp(node, 'init')", shutdown = "thp(node, 'shutdown')" },
                                nil, [[
      local function thp(node, when)
        if node.uid % 2 ~= 0 then return end
        for line in io.lines("/proc/self/status") do
          local on = line:match("^THP_enabled:%s+(%d)")
          if on then node.log:write("THP_enabled at %s %s", when, on) end
        end
      end]])
    for setting, want in pairs { [""] = "1", ["huge_pages = false\n"] = "0" } do
      for _, p in ipairs { 1, 2 } do
        local code, _, err, out = run(TINY .. probe .. setting .. "processes = " .. p .. "\n")
        assert.are.equal(0, code, err)
        for uid = 0, 2, 2 do
          local log = read_file(out .. "/" .. uid .. ".log")
          assert.matches("THP_enabled at init 0", log, 1, true)
          assert.matches("THP_enabled at shutdown " .. want, log, 1, true)
        end
      end
    end
  end)

  -- What the allocator does with the pages a round frees, from a node: kept for the next rounds
  -- once every node of the process is built (jemalloc: no decay), or given back as they decay
  -- (release_memory). In the ring of 4, node 1's third round comes after every node's first.
  it("keeps freed pages for the next rounds unless release_memory = true", function()
    if require("dpy.host.core").versions().allocator ~= "jemalloc" then
      pending("glibc's malloc (the sanitizer build): nothing is kept") return
    end
    local keeps = action_config("keeps", "post_train", [[
      if node.uid == 1 then node.log:write("round %d keeps_freed %s", r, host.memory().keeps_freed) end]])
    -- node 1 is built before nodes 2 and 3: its process still decays what it frees
    local decays = action_config("decays", "init", [[
      if node.uid == 1 then node.log:write("built, decay_ms %d", host.memory().decay_ms) end]])
    local probe = string.format("actions = { %s, %s }\n", keeps:match("{ (.-) }"), decays:match("{ (.-) }"))
    for setting, want in pairs { [""] = { 3 }, ["release_memory = true\n"] = {} } do
      local code, _, err, out = run(TINY .. probe .. setting)
      assert.are.equal(0, code, err)
      local log = read_file(out .. "/1.log")
      for r = want[1] or 1, 3 do
        assert.matches("round " .. r .. " keeps_freed " .. tostring(want[1] ~= nil), log, 1, true)
      end
      -- a run's process gives back what its nodes' start frees, though this script keeps (below)
      -- and the run is forked from it
      assert.matches("built, decay_ms 10000", log, 1, true)
    end
  end)

  -- A script keeps what it frees for its next steps, as a run's rounds do (a DP-SGD step took 1.1x
  -- with freed pages decaying: bench/dpsgd.lua).
  it("keeps freed pages in a script and the REPL", function()
    if require("dpy.host.core").versions().allocator ~= "jemalloc" then
      pending("glibc's malloc (the sanitizer build): nothing is kept") return
    end
    assert.are.equal(-1, require("dpy.host.core").memory().decay_ms)   -- this runner is a script
    local code, out = sh("echo 'require(\"dpy.host.core\").memory().decay_ms' | " .. BIN .. " repl")
    assert.are.equal(0, code)
    assert.are.equal("-1\n", out)
    -- unless the user set a decay
    code, out = sh("MALLOC_CONF=dirty_decay_ms:5000 " .. BIN
                   .. " -e 'print(require(\"dpy.host.core\").memory().decay_ms)'")
    assert.are.equal(0, code)
    assert.are.equal("5000\n", out)
  end)

  -- The same in this process: kept from the end of the last local node's build (its first slot)
  -- until the group is closed, then decaying again.
  it("keeps freed pages from the last build until the node group ends", function()
    local host = require "dpy.host.core"
    if host.versions().allocator ~= "jemalloc" then
      pending("glibc's malloc (the sanitizer build): nothing is kept") return
    end
    local group, ep = require("dpy.nodes.core").start {
      nodes = 2, process = 0, processes = 1, node_process = { 0, 0 }, uids = { 1 }, attach = true,
      run_id = 1, slots = 1, keep_freed = true, args = {} }
    assert.is_truthy(group, ep)
    ep:acquire(0)   -- the build
    assert.is_false(host.memory().keeps_freed)
    ep:release()
    assert.is_true(host.memory().keeps_freed)
    ep:acquire(1)
    ep:release()
    group:close()
    assert.is_false(host.memory().keeps_freed)
  end)

  -- A start holds 4 KiB pages until its last build is over, a failed one too (heap.c): here each
  -- node's build fails (no config to read back), and the process takes huge pages again before
  -- the group is closed.
  it("takes huge pages again once a start's builds are over, failed ones too", function()
    if not read_file("/proc/self/status"):find("THP_enabled:", 1, true) then
      pending("this kernel reports no THP_enabled") return
    end
    local host = require "dpy.host.core"
    local before = read_file("/proc/self/status"):match("THP_enabled:%s+(%d)")
    assert.is_true(host.huge_pages(true))
    local group = require("dpy.nodes.core").start {
      nodes = 2, process = 0, processes = 1, node_process = { 0, 0 }, uids = { 0, 1 }, run_id = 1,
      slots = 1, args = {} }
    local t0 = host.clock()
    while group:progress().running > 0 and host.clock() - t0 < 60 do host.sleep(0.01) end
    -- before g:wait, which joins the threads (and would end a hold left over)
    assert.matches("THP_enabled:%s+1", read_file("/proc/self/status"))
    assert.is_true(group:wait(60))
    assert.is_string(group:results()[0])
    group:close()
    host.huge_pages(before == "1")   -- as this process had it
  end)

  it("runs federated averaging and a parameter server, the server evaluating", function()
    -- ps samples no clients; its workers take the losses a node's training takes
    for alg, extra in pairs { fedavg = "fraction = 0.5\n", ps = "loss = 'mse'\n" } do
      local code, stdout, err, out = run(TINY .. "algorithm = '" .. alg .. "'\n" .. extra)
      assert.are.equal(0, code, err)
      assert.matches("over 1 evaluated honest node", stdout)
      assert.are.equal(3, #node_metrics(out, 0).test_accuracy)
      assert.is_nil(node_metrics(out, 1).test_accuracy)
    end
  end)

  it("gives a parameter server's workers the batches, targets and loss of a node's training", function()
    -- local_epochs: a worker's shard of 667 samples is 42 batches of 16, the run of local_steps = 42;
    -- the server waits for 3 workers' 42 steps on one process (20 s under the sanitizers, loaded)
    local one = "algorithm = 'ps'\nrounds = 1\npeer_timeout = 90\n"
    local _, _, err, epoch = run(TINY .. one .. "local_epochs = 1\n")
    local _, _, err2, steps = run(TINY .. one .. "local_steps = 42\n")
    assert.are.equal(read_file(steps .. "/0.model.pt"), read_file(epoch .. "/0.model.pt"), err .. err2)
    -- a binary task: one logit, bce_with_logits on the mapped labels (about ln 2 from the start)
    local code, _, err3, out = run(TINY .. one .. "task = 'binary'\npositive_classes = { 0, 6 }\n")
    assert.are.equal(0, code, err3)
    local loss = node_metrics(out, 1).train_loss[1][2]
    assert.is_true(math.abs(loss - math.log(2)) < 0.1, "worker 1's loss " .. loss)
  end)

  it("stops every node when a peer dies under on_peer_failure = 'abort'", function()
    local crash = action_file("crash", "pre_train",
      "if node.uid == 3 and r == 2 then host.kill(host.pid(), 9) end",
      'local host = require "dpy.host.core"')
    local cfg = TINY .. "processes = 2\n" .. crash
    local code, _, err, out = run(cfg)
    assert.are.equal(1, code)
    -- the signal named, and no ": " before an empty last line of its output
    assert.matches("dpy%-lua: process 1 exited with 137 %(killed by signal 9, SIGKILL%)\n", err)
    local m = node_metrics(out, 0)
    assert.truthy(m, "node 0's metrics stay readable")
    assert.is_true(#m.train_loss >= 1)

    code, _, err, out = run(cfg .. "on_peer_failure = 'continue'\n")
    assert.are.equal(1, code)   -- a process died: the run reports it
    assert.matches("process 1 exited with 137", err)
    for _, uid in ipairs { 0, 1 } do
      local mm = node_metrics(out, uid)
      assert.are.equal(3, #mm.test_accuracy, "node " .. uid .. " finished its rounds")
    end
    assert.matches("peer 3 is gone; continuing without it", read_file(out .. "/0.log"))
    assert.matches("peer 2 is gone; continuing without it", read_file(out .. "/1.log"))
  end)

  it("names a node's error and exits 1", function()
    local boom = action_file("boom", "post_train",
      'if node.uid == 2 and r == 2 then error("boom at round 2") end')
    local code, _, err, out = run(TINY .. boom)
    assert.are.equal(1, code)
    assert.matches("node 2 failed: .*boom at round 2", err)
    assert.matches("failed: .*boom at round 2", read_file(out .. "/2.log"))
    assert.matches("peer 2 failed: [^\n]*boom at round 2", read_file(out .. "/1.log"))   -- the true reason
  end)

  it("runs each compute slot on one core while a node holds it (pin_slots) #e2e", function()
    local cpus = action_file("cpus", "post_train", 'node.log:write("round %d: cpus %s", r, allowed())', [[
      local function allowed()   -- the calling thread's CPUs, as the kernel lists them
        local f = assert(io.open("/proc/thread-self/status"))
        local list = f:read("a"):match("Cpus_allowed_list:%s*(%S+)")
        f:close()
        return list
      end]])
    local function cpus_seen(extra)
      local code, _, err, out = run(TINY .. cpus .. extra)
      assert.are.equal(0, code, err)
      local seen = {}
      for uid = 0, 3 do
        for list in read_file(out .. "/" .. uid .. ".log"):gmatch("cpus (%S+)") do seen[list] = true end
      end
      return seen
    end
    local whole = io.open("/proc/self/status"):read("a"):match("Cpus_allowed_list:%s*(%S+)")
    for list in pairs(cpus_seen("")) do   -- slots: one per core, by default
      assert.matches("^%d+$", list, "one core per slot, not " .. list)
    end
    assert.are.same({ [whole] = true }, cpus_seen("pin_slots = false\n"))
    assert.are.same({ [whole] = true }, cpus_seen("slots = 1\n"), "fewer slots than CPUs: not pinned")
  end)

  it("gives a held compute slot back while a node waits for a message", function()
    -- one slot; each node receives in post_train, holding the slot, from a node still to train
    local relay = action_file("relay", "post_train", [[
      local n = node.cfg.nodes
      node.endpoint:send((node.uid + 1) % n, 5, r, "hello " .. node.uid)
      local got = node.endpoint:recv((node.uid - 1) % n, 5, r, 10)
      node.log:write("round %d: got %s", r, tostring(got))]])
    local code, _, err, out = run(TINY .. "slots = 1\n" .. relay)
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      local _, got = read_file(out .. "/" .. uid .. ".log"):gsub("got hello " .. (uid - 1) % 4, "")
      assert.are.equal(3, got, "node " .. uid .. " got its neighbour's message every round")
    end
  end)

  it("sends a model's flat copy itself to local receivers, read-only from then on", function()
    local share = action_file("share", "post_train", [[
      local n = node.cfg.nodes
      local flat = node.model:get_flat()
      flat:add_(1)   -- writable until sent
      local other = flat:clone()
      node.endpoint:send((node.uid + 1) % n, 5, r, flat)
      node.endpoint:send((node.uid + 1) % n, 6, r, other)
      local ok, err = pcall(flat.add_, flat, 1)
      other:add_(1)   -- an ordinary tensor was copied: still the sender's
      local got = node.endpoint:recv((node.uid - 1) % n, 5, r, 10, "float32")
      local copy = node.endpoint:recv((node.uid - 1) % n, 6, r, 10, "float32")
      node.log:write("round %d: refused %s (%s), equal %s", r, tostring(not ok), tostring(err),
                     tostring((got - copy):abs():max():item() == 0))]])
    local code, _, err, out = run(TINY .. share)
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      local log = read_file(out .. "/" .. uid .. ".log")
      local refused = "refused true %([^)]*read%-only dpy.Tensor %(shared: the dataset, or a model sent"
      local _, seen = log:gsub(refused, "")
      local _, equal = log:gsub("equal true", "")
      assert.are.equal(3, seen, log)
      assert.are.equal(3, equal, log)
    end
  end)

  it("sends the parameters themselves (share_flat), and copies them on write while a receiver reads them", function()
    -- each write below comes while the node's own inbox still holds what it sent: the message must
    -- keep the values it had when sent, and the model must take the write
    local share = action_file("share", "post_train", [[
      local m, uid, parts = node.model, node.uid, {}
      local function check(what, write, want)
        local flat = m:share_flat()
        local sent = flat:clone()
        parts[#parts + 1] = what .. " read-only " .. tostring(not pcall(flat.add_, flat, 1))
        node.endpoint:send(uid, 7, r, flat)
        flat:free()
        write(sent)
        local got = node.endpoint:recv(uid, 7, r, 10, "float32")
        local now = m:get_flat()
        parts[#parts + 1] = string.format("%s kept %s took %s", what, tostring((got - sent):abs():max():item() == 0),
                                          tostring((now - want(sent)):abs():max():item() == 0))
        got:free()
      end
      check("mix", function(s) m:mix(0.5, { s + 2 }, { 0.5 }) end, function(s) return s * 0.5 + (s + 2) * 0.5 end)
      check("set_flat", function(s) m:set_flat(s + 3) end, function(s) return s + 3 end)
      check("own_flat", function()
              m:own_flat()   -- then a write that does not copy on its own
              tensor.no_grad(function() for _, p in ipairs(m:parameters()) do p:add_(1) end end)
            end,
            function(s) return s + 1 end)
      check("free", function() end, function(s) return s end)   -- read and given back: nothing moved
      m:mix(1, {}, {})
      node.log:write("round %d: %s", r, table.concat(parts, ", "))]], 'local tensor = require "dpy.tensor"')
    local code, _, err, out = run(TINY .. share)
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      local log = read_file(out .. "/" .. uid .. ".log")
      for _, what in ipairs { "mix", "set_flat", "own_flat", "free" } do
        local _, ro = log:gsub(what .. " read%-only true", "")
        local _, ok = log:gsub(what .. " kept true took true", "")
        assert.are.equal(3, ro, what .. ": " .. log)
        assert.are.equal(3, ok, what .. ": " .. log)
      end
    end
  end)

  it("starts the nodes of a process on one copy of the initial model, and a write reaches one node", function()
    -- node 0 writes its model at startup through the parameters it took when built, once every
    -- other node is built on the copy it shares (share_initial): the write must reach node 0 alone
    local path = tmpdir() .. "/startup_write.lua"
    write_file(path, [[
      local registry = require "dpy.registry"
      local tensor = require "dpy.tensor"
      return registry.register { kind = "action", name = "startup_write",
        new = function(_, node)
          local params = node.model:parameters()
          local ep = node.endpoint
          return { startup = function(n)
            if n.uid == 0 then
              for k = 1, 7 do assert(ep:recv(k, 7, 0, 20, "float32")) end   -- built, every one
              tensor.no_grad(function() for _, p in ipairs(params) do p:add_(1) end end)
              for k = 1, 7 do ep:send(k, 7, 0, tensor.zeros(1)) end
            else
              ep:send(0, 7, 0, tensor.zeros(1))
              assert(ep:recv(0, 7, 0, 20, "float32"))   -- written
            end
            n.log:write("startup sum %.6f", n.model:get_flat():sum():item())
          end }
        end }]])
    local code, _, err, out = run(TINY .. "nodes = 8\nrounds = 1\nactions = { '" .. path .. "' }\n")
    assert.are.equal(0, code, err)
    local sums = {}
    for uid = 0, 7 do sums[uid] = tonumber(read_file(out .. "/" .. uid .. ".log"):match("startup sum (%S+)")) end
    for uid = 2, 7 do assert.are.equal(sums[1], sums[uid], "node " .. uid) end
    assert.is_true(math.abs(sums[0] - sums[1] - 215370) < 1, sums[0] - sums[1])   -- the cnn's parameters, + 1 each
  end)

  it("gives a user's algorithm that trains through node.trainer its own copy of the initial model", function()
    -- no exchange.train: the trainer's own step must take the model from the copy the nodes share
    local path = tmpdir() .. "/local_only.lua"
    write_file(path, [[
      local registry = require "dpy.registry"
      return registry.register { kind = "algorithm", name = "local_only",
        new = function() return function(node, r)
          node.endpoint:acquire(r)
          local loss = node.trainer:run(node.local_steps)
          node.endpoint:release()
          return loss, 0
        end end }]])
    local outs = run_layouts(TINY .. "nodes = 8\nrounds = 1\nalgorithm = '" .. path .. "'\n")
    for uid = 0, 7 do
      local name = "/" .. uid .. ".model.pt"
      assert.are.equal(read_file(outs[1] .. name), read_file(outs[2] .. name), "node " .. uid)
    end
  end)

  it("hands a free compute slot to the waiting node with the lowest round, then the lowest rank", function()
    -- one slot: node 0 holds it while the others ask for it with the rounds below, one after
    -- another from the highest rank down (so that neither the order of asking nor the rank alone
    -- gives the order checked), then lets go; each holds it in turn for a moment and logs when it
    -- got it. Node 0 asks as round 1, which waits for every node's build (a round 0 request would
    -- go before the builds still waiting)
    local path = tmpdir() .. "/slot_order.lua"
    write_file(path, [[
      local registry = require "dpy.registry"
      local host = require "dpy.host.core"
      local tensor = require "dpy.tensor"
      local ASK = { 3, 1, 2, 1, 2, 0 }
      return registry.register { kind = "algorithm", name = "slot_order",
        new = function() return function(node, r)
          local ep = node.endpoint
          if node.uid == 0 then
            ep:acquire(1)
            local deadline = host.clock() + 60
            for k = 6, 1, -1 do
              ep:send(k, 7, r, tensor.zeros(1))
              while ep:slots_waiting() < 7 - k do   -- node k asks before the next is told to
                assert(host.clock() < deadline, "node " .. k .. " did not ask for the slot")
                host.sleep(0.01)
              end
            end
          else
            assert(ep:recv(0, 7, r, 20, "float32"))
            ep:acquire(ASK[node.uid])
            node.log:write("slot at %.6f", host.clock())
            host.sleep(0.05)
          end
          ep:release()
          return 0, 0
        end end }]])
    local code, _, err, out = run(TINY .. "nodes = 7\nrounds = 1\nslots = 1\n"
                                  .. "algorithm = '" .. path .. "'\n")
    assert.are.equal(0, code, err)
    local order = {}
    for uid = 1, 6 do order[uid] = uid end
    local at = {}
    for uid = 1, 6 do at[uid] = tonumber(read_file(out .. "/" .. uid .. ".log"):match("slot at (%S+)")) end
    table.sort(order, function(a, b) return at[a] < at[b] end)
    assert.are.same({ 6, 2, 4, 3, 5, 1 }, order)
  end)

  it("builds every node of a process before any node trains", function()
    -- the threads start one after another: a slot given back while the next ones were still being
    -- created went to a built node's first training, which put off the builds after it. Each node
    -- records when its training ended; less its train_seconds, when it began.
    local config = TINY:gsub("nodes = 4", "nodes = 256"):gsub("graph = 'ring'", "graph = { 'regular', degree = 4 }")
    local code, _, err, out = run(config .. "rounds = 1\nlocal_steps = 1\neval_every = 100\n"
      .. action_file("trained_at", "post_train", "node.metrics:add('trained_at', r, host.clock() - node.t0)"))
    assert.are.equal(0, code, err)
    local last_ready, first_train = 0, math.huge
    for uid = 0, 255 do
      local m = node_metrics(out, uid)
      last_ready = math.max(last_ready, m.ready_seconds[1][2])
      first_train = math.min(first_train, m.trained_at[1][2] - m.train_seconds[1][2])
    end
    assert.is_true(last_ready <= first_train, string.format(
      "a node began training at %.3f s, before the last node was built (%.3f s)", first_train, last_ready))
  end)

  it("gives a user's algorithm that trains after sharing the model its own copy first", function()
    -- no combine between the send and the training: the optimizer's in-place step must not reach
    -- the message the node's own inbox still holds, nor may an action's handler
    local path = tmpdir() .. "/share_then_train.lua"
    write_file(path, [[
      local registry = require "dpy.registry"
      local exchange = require "dpy.exchange"
      return registry.register { kind = "algorithm", name = "share_then_train", graph = true,
        new = function() return function(node, r)
          local flat = exchange.model_flat(node)
          local sent = flat:clone()
          node.endpoint:send(node.uid, 3, r, flat)
          flat:free()
          local loss, secs = exchange.train(node, node.local_steps)
          node:fire("post_train", r)
          local got = node.endpoint:recv(node.uid, 3, r, 10, "float32")
          node.log:write("round %d: kept %s", r, tostring((got - sent):abs():max():item() == 0))
          got:free()
          flat = exchange.model_flat(node)   -- and a round that ends with its model still shared
          node.endpoint:send(node.uid, 4, r, flat)
          flat:free()
          return loss, secs
        end end }]])
    local poke = action_file("poke", "post_train", [[
      local flat = exchange.model_flat(node)
      node.endpoint:send(node.uid, 5, r, flat)
      flat:free()
      node:fire("post_exchange", r)   -- a handler that writes the model in place
      local got = node.endpoint:recv(node.uid, 5, r, 10, "float32")
      node.log:write("round %d: poked %s", r, tostring((got - node.model:get_flat()):abs():max():item() ~= 0))]],
      'local exchange = require "dpy.exchange"')
    local bump = action_file("bump", "post_exchange", [[
      tensor.no_grad(function() for _, p in ipairs(node.model:parameters()) do p:add_(1) end end)]],
      'local tensor = require "dpy.tensor"')
    local actions = string.format("actions = { '%s', '%s' }\n", poke:match("'(.-)'"), bump:match("'(.-)'"))
    local code, _, err, out = run(TINY .. "algorithm = '" .. path .. "'\n" .. actions)
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      local log = read_file(out .. "/" .. uid .. ".log")
      local _, kept = log:gsub("kept true", "")
      local _, poked = log:gsub("poked true", "")
      assert.are.equal(3, kept, log)
      assert.are.equal(3, poked, log)
    end
  end)

  it("buffers delayed and duplicated messages by round: the same numbers as without faults", function()
    local code, _, err, clean = run(TINY)
    assert.are.equal(0, code, err)
    local faulty
    code, _, err, faulty = run(TINY .. "faults = { delay = 0.05, duplicate = 0.5 }\n")
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      assert.are.same(node_metrics(clean, uid).test_accuracy, node_metrics(faulty, uid).test_accuracy)
    end
  end)

  it("rejects, counts and logs corrupted packets, and keeps running", function()
    local cfg = TINY .. "faults = { corrupt = 1.0 }\non_peer_failure = 'continue'\n"
    local code, _, err, out = run(cfg)
    assert.are.equal(0, code, err)
    local log = read_file(out .. "/0.log")
    assert.matches("packet%(s%) rejected by this process so far %(last: checksum mismatch from node", log)
    assert.matches("round 1: rejected node 1's payload: malformed: checksum mismatch from node 1", log)
    assert.not_matches("sent nothing", log)   -- a corrupt packet is named, not waited out
    assert.are.equal(3, #node_metrics(out, 0).test_accuracy)
  end)

  it("trains a binary task and whole local epochs", function()
    local code, _, err, out = run(TINY .. "task = 'binary'\npositive_classes = { 0, 6 }\nlocal_epochs = 1\n")
    assert.are.equal(0, code, err)
    assert.matches("500 training samples, 3 rounds of 32 local steps", read_file(out .. "/0.log"))
    local acc = node_metrics(out, 0).test_accuracy[3][2]
    assert.is_true(acc > 0.75, "binary accuracy " .. acc)
  end)

  it("builds a node of a config in the REPL", function()
    local dir = tmpdir()
    write_file(dir .. "/c.lua", TINY)
    write_file(dir .. "/in.txt", "node.uid, #node:neighbours(), node.indices:numel()\nnode:train(2) > 0\n")
    local code, out, err = sh(BIN .. " repl " .. dir .. "/c.lua --uid 2 < " .. dir .. "/in.txt")
    assert.are.equal(0, code, err)
    assert.matches("node 2 of 4", out)
    assert.matches("2\t2\t500\ntrue\n", out)
    code, out, err = sh(BIN .. " repl " .. dir .. "/c.lua --uid 9 < /dev/null")
    assert.are.equal(2, code)
    assert.are.equal("", out)
    assert.matches("%-%-uid 9: the config has 4 nodes", err)
  end)

  it("reports config mistakes with file and line", function()
    local code, _, err = run("nodes = 4\ngraph = 'rign'\n")
    assert.are.equal(2, code)
    assert.matches("c.lua:2: graph: no graph named 'rign' %(did you mean 'ring'%?%)", err)
    code, _, err = run("nodes = 4\nalgorithm = 'gossip'\n")
    assert.are.equal(2, code)
    assert.matches("c.lua:2: algorithm: no algorithm named 'gossip'; valid: async, dpsgd, epidemic, fedavg, ps, "
                   .. "secure_fedavg, or the path of a Lua file", err)
  end)

  it("runs a user action from configs/actions that wraps the outgoing model", function()
    local action = "{ '" .. REPO .. "/configs/actions/noisy_model.lua', nodes = { 1 }, sigma = 0.5 }"
    local code, _, err, out = run(TINY .. "actions = { " .. action .. " }\n")
    assert.are.equal(0, code, err)
    assert.matches("noisy_model: sending models with noise", read_file(out .. "/1.log"))
  end)
end)

describe("reset_optimizer #e2e", function()
  -- DecentralizePy's reset_optimizer: the optimizer's state goes before each round's training. With
  -- one local step a round, SGD's momentum then never acts: the run is plain SGD's, bit for bit.
  it("drops the optimizer's state before each round: one local step with momentum is plain SGD", function()
    local function series(lines)
      local code, _, err, out = run(TINY .. "local_steps = 1\n" .. lines)
      assert.are.equal(0, code, err)
      return { node_metrics(out, 0), node_metrics(out, 3) }
    end
    local plain = series("optimizer = { 'sgd', lr = 0.05 }\n")
    local reset = series("optimizer = { 'sgd', lr = 0.05, momentum = 0.9 }\nreset_optimizer = true\n")
    local kept = series("optimizer = { 'sgd', lr = 0.05, momentum = 0.9 }\n")
    for i = 1, 2 do
      assert.are.same(plain[i].train_loss, reset[i].train_loss)
      assert.are.same(plain[i].test_accuracy, reset[i].test_accuracy)
      assert.are.equal(plain[i].train_loss[1][2], kept[i].train_loss[1][2])   -- round 1: a fresh state in all
      assert.are_not.equal(plain[i].train_loss[3][2], kept[i].train_loss[3][2])
    end
  end)

  it("is refused with ps, whose workers do not train (the server steps its optimizer): a config error", function()
    local code, _, err, out = run(TINY .. "algorithm = 'ps'\nreset_optimizer = true\n")
    assert.are.equal(2, code)
    assert.matches("reset_optimizer: .*not ps", err)
    assert.is_nil(io.open(out .. "/config.json"))
  end)
end)

describe("fedavg's sample of clients (exchange.sampled)", function()
  local exchange = require "dpy.exchange"

  it("is Floyd's seeded sample of fraction x clients, the same on every node (computed in Python)", function()
    local function cfg(nodes, fraction, seed) return { nodes = nodes, fraction = fraction, seed = seed } end
    assert.are.same({ 2, 3, 4, 7 }, exchange.sampled(cfg(16, 0.25, 1), 1))
    assert.are.same({ 3, 4, 10, 14 }, exchange.sampled(cfg(16, 0.25, 1), 2))
    assert.are.same({ 6, 19, 24, 77, 96 }, exchange.sampled(cfg(101, 0.05, -5), 7))
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9 }, exchange.sampled(cfg(10, 1.0, 1), 1))
    for u = 1, 15 do
      local listed = false
      for _, c in ipairs(exchange.sampled(cfg(16, 0.25, 1), 2)) do listed = listed or c == u end
      assert.are.equal(listed, exchange.is_sampled(cfg(16, 0.25, 1), 2, u), u)
    end
    assert.is_true(exchange.is_sampled(cfg(10, 1.0, 1), 1, 9))
  end)

  it("costs its sample's size, not the node count", function()
    -- every node asks every round: a shuffle of every client was O(nodes) a node a round
    collectgarbage("stop")
    local before = collectgarbage("count")
    for r = 1, 20 do
      local c = { nodes = 1000000, fraction = 0.0001, seed = 1 }
      assert.are.equal(100, #exchange.sampled(c, r))
      if exchange.is_sampled then exchange.is_sampled(c, r, 5) end
    end
    local kib = collectgarbage("count") - before
    collectgarbage("restart")
    assert.is_true(kib < 256, string.format("20 rounds' questions took %.0f KiB at a million nodes", kib))
  end)
end)
