-- Checkpoint and resume: generator state, the dict-of-tensors file, and a run killed mid-way
-- and resumed ending bit for bit as the uninterrupted one, in one process and in two.
local tensor = require "dpy.tensor"
local checkpoint = require "dpy.checkpoint"
local host = require "dpy.host.core"

-- Whether tensors a and b hold the same dtype, shape and values (bit for bit: NaN-free here).
local function same(a, b)
  return a:dtype() == b:dtype() and table.concat(a:size(), "x") == table.concat(b:size(), "x")
         and a:eq(b):all():item()
end

describe("generator state", function()
  it("comes back: the draws after set_state are those after state()", function()
    local g = tensor.generator(7)
    tensor.rand(5, { generator = g }):free()
    local s = g:state()
    local a = tensor.randperm(50, { generator = g })
    tensor.rand(9, { generator = g }):free()
    g:set_state(s)
    local b = tensor.randperm(50, { generator = g })
    assert.is_true(same(a, b))
  end)

  it("refuses what is not a state, naming why", function()
    local g = tensor.generator(7)
    assert.has_error(function() g:set_state(tensor.zeros(3)) end,
                     "generator:set_state: a generator state is a uint8 tensor, got Float")
    local ok, err = pcall(g.set_state, g, tensor.zeros(3, "uint8"))
    assert.is_false(ok)
    assert.matches("RNG state size", err)
  end)
end)

describe("tensor.pickle", function()
  it("round-trips a dict of tensors in order", function()
    local bytes = tensor.pickle({ "w", "b" }, { tensor.arange(4), tensor.ones(2, 2) })
    assert.are.equal("PK", bytes:sub(1, 2))   -- PyTorch's zip format
    local names, ts = tensor.unpickle(bytes)
    assert.are.same({ "w", "b" }, names)
    assert.are.same({ 0, 1, 2, 3 }, ts[1]:totable())
    assert.are.same({ { 1, 1 }, { 1, 1 } }, ts[2]:totable())
  end)

  -- bytes of tensor.pickle({"w", "b"}, {arange(4), ones(2, 2)}) read by a reference reader of
  -- torch.load's format (zipfile + pickle with persistent_load, in pure Python): the keys,
  -- shapes and values above. The archive's members are those torch.save writes.
  it("writes the members torch.load reads", function()
    local bytes = tensor.pickle({ "w" }, { tensor.arange(4) })
    for _, member in ipairs { "archive/data.pkl", "archive/data/0", "archive/version" } do
      assert.truthy(bytes:find(member, 1, true), member)
    end
  end)

  it("refuses bytes of which a member fails its CRC: a bit flipped in a value is no number", function()
    local bytes = tensor.pickle({ "w" }, { tensor.ones(256) })
    local at = assert(bytes:find(string.pack("<f<f", 1, 1), 1, true)) + 100   -- within the values
    local flipped = bytes:sub(1, at - 1) .. string.char(bytes:byte(at) ~ 0x40) .. bytes:sub(at + 1)
    local names, err = tensor.unpickle(flipped)
    assert.is_nil(names)
    assert.matches("archive/data/0: corrupt member (CRC error)", err, 1, true)
    assert.are.same({ "w" }, (tensor.unpickle(bytes)))
  end)

  it("refuses a name twice and bytes that are not such a dict", function()
    assert.has_error(function() tensor.pickle({ "a", "a" }, { tensor.zeros(1), tensor.zeros(1) }) end)
    local names, err = tensor.unpickle("garbage")
    assert.is_nil(names)
    assert.matches("zip archive", err)
    assert.has_error(function() tensor.pickle({ "a" }, {}) end)
  end)
end)

describe("checkpoint.read", function()
  it("names the file and the problem of a file that is no checkpoint", function()
    local dir = tmpdir()
    write_file(dir .. "/x.ckpt", "not a zip")
    local ck, err = checkpoint.read(dir .. "/x.ckpt")
    assert.is_nil(ck)
    assert.matches(dir .. "/x.ckpt: not a checkpoint", err, 1, true)
    write_file(dir .. "/y.ckpt", tensor.pickle({ "model" }, { tensor.zeros(3) }))
    ck, err = checkpoint.read(dir .. "/y.ckpt")
    assert.is_nil(ck)
    assert.matches("not a checkpoint (no meta)", err, 1, true)
  end)

  it("reads its meta as data: a file whose meta loops is refused, not run for ever", function()
    local dir = tmpdir()
    local loop = tensor.from_bytes("(function() while true do end end)()", "uint8")
    write_file(dir .. "/z.ckpt", tensor.pickle({ "meta" }, { loop }))
    local ck, err = checkpoint.read(dir .. "/z.ckpt")
    assert.is_nil(ck)
    assert.matches("not a checkpoint (its meta does not read)", err, 1, true)
    -- a long one (a run's metrics) reads
    local meta = { format = checkpoint.FORMAT, round = 3, metrics = {} }
    for i = 1, 20000 do meta.metrics[i] = { i, i / 3, "x" } end
    local src = require("dpy.serialize").value(meta, "m")
    write_file(dir .. "/m.ckpt", tensor.pickle({ "meta" }, { tensor.from_bytes(src, "uint8") }))
    ck = assert(checkpoint.read(dir .. "/m.ckpt"))
    assert.are.equal(20000, #ck.meta.metrics)
  end)

  it("resume_round: the minimum of the nodes' last rounds; a node without one is named", function()
    local dir = tmpdir()
    for u, rounds in pairs { [0] = { 1, 2, 3 }, [1] = { 2 }, [2] = { 2, 3 } } do
      assert(require("dpy.host.core").mkdir_p(dir .. "/ckpt/" .. u))
      for _, r in ipairs(rounds) do
        write_file(checkpoint.path(dir, u, r), tensor.pickle({ "meta" }, { tensor.ones(1) }))
      end
    end
    assert.are.equal(2, checkpoint.resume_round(dir, 3))
    local r, err = checkpoint.resume_round(dir, 4)
    assert.is_nil(r)
    assert.matches("node 3 has no checkpoint", err)
    assert.matches("the run needs checkpoint_every", err)
    -- a run with checkpoint_every whose node stopped before its first (a full disk): not "needs checkpoint_every"
    r, err = checkpoint.resume_round(dir, 4, 2)
    assert.is_nil(r)
    assert.matches("node 3 has no checkpoint %(ckpt/3/<round>%.ckpt%): nothing to resume %(it stopped before its "
                   .. "first, of round 2: run the config again%)", err)
    checkpoint.prune(dir, 0, 3)   -- every node has round 2: round 1 of node 0 can go
    assert.are.same({ 2, 3 }, checkpoint.rounds(dir, 0))
  end)

  -- an empty 999.ckpt planted beside node 1's and 2's made their last round 999: prune removed node
  -- 0's round 2 (the round to resume from), and a resume chose round 3, which node 1 never wrote
  it("counts only the checkpoints that read as whole for prune and resume: an empty or cut file is none", function()
    local dir = tmpdir()
    local whole = tensor.pickle({ "meta" }, { tensor.ones(1) })
    for u, rounds in pairs { [0] = { 1, 2, 3 }, [1] = { 2 }, [2] = { 2, 3 } } do
      assert(require("dpy.host.core").mkdir_p(dir .. "/ckpt/" .. u))
      for _, r in ipairs(rounds) do write_file(checkpoint.path(dir, u, r), whole) end
    end
    write_file(checkpoint.path(dir, 1, 999), "")
    write_file(checkpoint.path(dir, 2, 999), whole:sub(1, -10))   -- cut short
    write_file(checkpoint.path(dir, 2, 998), "x" .. whole:sub(2))   -- no zip archive
    assert.are.same({ 2 }, checkpoint.rounds(dir, 1))
    assert.are.same({ 2, 3 }, checkpoint.rounds(dir, 2))
    assert.are.equal(2, checkpoint.resume_round(dir, 3))
    checkpoint.prune(dir, 0, 3)
    assert.are.same({ 2, 3 }, checkpoint.rounds(dir, 0))
    checkpoint.drop_after(dir, 1, 2)   -- a resumed node's later files go, whole or not
    assert.is_nil(io.open(checkpoint.path(dir, 1, 999)))
  end)

  it("a resume takes the interruption it continues into its own record: the run is no longer interrupted", function()
    local metrics, experiment = require "dpy.metrics", require "dpy.experiment"
    local dir = tmpdir()
    write_file(dir .. "/manifest.json", '{"seed": 1, "interrupted": {"signal": "SIGINT", "round": 1}}')
    experiment.record_resume { dir = dir, resume = 1, run_id = 7, argv = { "run", "--resume", dir } }
    local m = metrics.read(dir .. "/manifest.json")
    assert.is_nil(m.interrupted)
    assert.are.same({ signal = "SIGINT", round = 1 }, m.resumed[1].interrupted)
    assert.are.equal(1, m.resumed[1].round)
    -- a report of the finished run marks nothing
    write_file(dir .. "/config.json", '{"nodes": 1, "rounds": 3, "name": "c"}')
    write_file(dir .. "/0.metrics.json", '{"uid": 0, "metrics": {"test_accuracy": [[3, 0.5]]}}')
    local run = assert(require("dpy.report").load(dir))
    assert.are.same({}, run.marks)
  end)
end)

-- The series that do not measure time.
local TIMED = { train_seconds = true, exchange_seconds = true, wall_seconds = true, ready_seconds = true }

local function values(out, nodes)
  local all = {}
  for u = 0, nodes - 1 do
    local m = assert(node_metrics(out, u), "metrics of node " .. u)
    for name, series in pairs(m) do
      if not TIMED[name] then all[u .. "." .. name] = series end
    end
  end
  return all
end

local function model_of(out, uid)
  local names, ts = tensor.unpickle(assert(read_file(string.format("%s/%d.model.pt", out, uid))))
  assert(names, ts)
  return names, ts
end

describe("a run killed and resumed #e2e", function()
  local CONFIG = TINY_RUN .. "rounds = 4\ncheckpoint_every = 1\nactions = { 'kill.lua' }\n"

  -- An action that SIGKILLs node uid's (default 0) process as its round 3 starts, unless marker
  -- exists, once every node has a checkpoint (a node far behind, under load, may not have one yet:
  -- then there would be nothing to resume from).
  local function kill_action(dir, marker, uid)
    write_file(dir .. "/kill.lua", string.format([[
local registry = require "dpy.registry"
local host = require "dpy.host.core"
local checkpoint = require "dpy.checkpoint"
return registry.register { kind = "action", name = "kill_once", new = function()
  return { pre_train = function(node, r)
    if node.uid ~= %d or r ~= 3 then return end
    local f = io.open(%q, "r")
    if f then f:close() return end
    f = assert(io.open(%q, "w"))
    f:close()
    node.endpoint:release()
    for _ = 1, 600 do
      local all = true
      for u = 0, node.cfg.nodes - 1 do
        all = all and #checkpoint.rounds(node.dir, u) > 0
      end
      if all then break end
      host.sleep(0.05)
    end
    host.kill(host.pid(), 9)
  end }
end }
]], uid or 0, marker, marker))
  end

  -- the built-in actions that keep state across rounds: what a Byzantine node saw the round
  -- before (ALIE crafts from it), and local DP's start model and noise
  local STATEFUL = "actions = { 'kill.lua', { 'byzantine_attack', attack = 'alie', nodes = { 2 } }, "
                   .. "{ 'differential_privacy', mode = 'local', noise = 0.01 } }\n"
  -- sharing rules with state: topk's residual and copies of the neighbours, CHOCO's public copies
  local SPARSE = { { 1, "sharing = { 'topk', alpha = 0.1 }\n", "topk sharing" },
                   { 2, "sharing = { 'choco', alpha = 0.05 }\n", "choco sharing" },
                   -- a FedAvg client's residual (the server trains nothing: a client is killed)
                   { 1, "algorithm = 'fedavg'\nfraction = 1\nsharing = { 'topk', alpha = 0.1 }\n",
                     "fedavg with topk uploads", 1 } }
  -- the simulated clock goes on from the checkpoint's time: the same sim_seconds as the run that was not
  local SIM = { 1, "stragglers = { factors = { 1, 1, 1, 4 } }\n"
                   .. "sim_clock = { step_seconds = 0.01, latency = 0.005, bandwidth = 1e7 }\n", "simulated clock" }
  -- the other algorithms' state: a parameter server's optimizer (a worker is killed), epidemic's draws
  local OTHERS = { { 1, "algorithm = 'ps'\n", "ps", 1 }, { 2, "algorithm = { 'epidemic', s = 2 }\n", "epidemic" } }
  for _, case in ipairs { { 1 }, { 2 }, { 1, STATEFUL, "stateful actions" }, SPARSE[1], SPARSE[2], SPARSE[3], SIM,
                          OTHERS[1], OTHERS[2] } do
    local processes = case[1]
    it(string.format("ends bit for bit as the run that was not (%d process%s%s)", processes,
                     processes > 1 and "es" or "", case[3] and ", " .. case[3] or ""), function()
      local config = CONFIG .. "processes = " .. processes .. "\n" .. (case[2] or "")
      local ref = tmpdir()
      kill_action(ref, ref .. "/never", case[4])
      write_file(ref .. "/never", "")
      write_file(ref .. "/c.lua", config)
      local code, _, err = sh(shell_quote(DPY_BIN) .. " run -q " .. ref .. "/c.lua --out " .. ref .. "/out")
      assert.are.equal(0, code, err)

      local dir = tmpdir()
      kill_action(dir, dir .. "/killed", case[4])
      write_file(dir .. "/c.lua", config)
      code = sh(shell_quote(DPY_BIN) .. " run -q " .. dir .. "/c.lua --out " .. dir .. "/out")
      assert.are_not.equal(0, code)
      assert.truthy(read_file(dir .. "/killed"), "the first attempt was killed")
      assert.is_nil(read_file(dir .. "/out/0.model.pt"), "the first attempt did not finish")
      local out
      code, out, err = sh(shell_quote(DPY_BIN) .. " run --resume " .. dir .. "/out")
      assert.are.equal(0, code, err)
      local from = tonumber(out:match("resuming .* from round ([12])"))
      assert.truthy(from, out)
      -- the summary counts the rounds this run ran, and times them
      local last, secs, per = out:match("rounds " .. from + 1 .. "%-(%d+) in ([%d.]+) s: ([%d.]+) s per round")
      assert.are.equal("4", last, out)
      assert.is_true(math.abs(tonumber(per) * (4 - from) - tonumber(secs)) < 0.052, out)   -- %.3f and %.1f
      -- the progress line counts the run's bytes as the summary does, the rounds before the resume too
      local mb = out:match("\n  ([%d.]+) MB exchanged per")
      local last_line = err:match(".*(round 4/4[^\n]*)")
      assert.truthy(mb and last_line, out .. err)
      assert.matches("  " .. mb .. " MB exchanged per", last_line, 1, true)

      local want = values(ref .. "/out", 4)
      assert.are.same(want, values(dir .. "/out", 4))
      if case == SIM then assert.are.equal(4, #want["3.sim_seconds"]) end
      for u = 0, 3 do
        local names, a = model_of(ref .. "/out", u)
        local names2, b = model_of(dir .. "/out", u)
        assert.are.same(names, names2)
        for i = 1, #a do assert.is_true(same(a[i], b[i]), names[i]) end
      end
      local manifest = require("dpy.metrics").read(dir .. "/out/manifest.json")
      assert.are.equal(1, #manifest.resumed)
    end)
  end

  it("stops when its run directory is removed, and does not make it again", function()
    -- a node's checkpoint made the whole path again (mkdir -p): the run went on to its last round
    -- into a directory without manifest or logs, then failed on a source line of the launcher
    local gone = action_config("gone", "pre_train",
                               "if node.uid == 0 and r == 2 then "   -- again while other nodes write in it
                               .. "local d = node.dir; "
                               .. "os.execute('while [ -e ' .. d .. ' ]; do rm -rf ' .. d .. '; done') end")
    local t0 = require("dpy.host.core").clock()
    local code, _, err, out = run_config(TINY_RUN:gsub("rounds = 3", "rounds = 300") .. "checkpoint_every = 1\n"
                                         .. gone, "-q")
    local seconds = require("dpy.host.core").clock() - t0
    assert.are.equal(1, code, err)
    assert.matches("run directory " .. out:gsub("%p", "%%%0") .. " was removed", err)
    assert.not_matches("launcher%.lua:%d", err)
    assert.is_false(require("dpy.paths").exists(out), "the run directory was made again")
    assert.is_true(seconds < 30, string.format("took %.1f s", seconds))
  end)

  it("--resume refuses a directory without checkpoints, and overrides", function()
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 1\n", "-q")
    assert.are.equal(0, code, err)
    code, _, err = sh(shell_quote(DPY_BIN) .. " run --resume " .. out)
    assert.are.equal(1, code)
    assert.matches("node 0 has no checkpoint", err)
    code, _, err = sh(shell_quote(DPY_BIN) .. " run --resume " .. out .. " rounds=3")
    assert.are.equal(2, code)
    assert.matches("no %-%-out, %-%-seed, %-%-force or KEY=VALUE", err)
  end)

  it("--resume of a run that finished all its rounds says there is nothing to resume, --paused or not", function()
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 1\ncheckpoint_every = 1\n", "-q")
    assert.are.equal(0, code, err)
    for _, paused in ipairs { " --paused", "" } do
      code, _, err = sh("timeout 20 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. paused)
      assert.are.equal(1, code, paused .. ": " .. err)   -- not 124: paused before a round that never comes
      assert.are.equal("dpy-lua run: " .. out .. ": the run finished all its 1 round (every node checkpointed "
                       .. "round 1, and wrote its final model): nothing to resume\n", err)
    end
    -- stopped after its last checkpoint, before a node wrote its final model: the resume finishes it
    local model = read_file(out .. "/2.model.pt")
    os.remove(out .. "/2.model.pt")
    code, _, err = sh("timeout 60 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. " -q")
    assert.are.equal(0, code, err)
    assert.are.equal(model, read_file(out .. "/2.model.pt"))
  end)

  it("--resume long after the run stopped: its processes' old progress files are no silence of the new ones",
     function()
    local metrics = require "dpy.metrics"
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 1\ncheckpoint_every = 1\nprocesses = 2\n", "-q")
    assert.are.equal(0, code, err)
    os.remove(out .. "/2.model.pt")   -- stopped before node 2 wrote its final model: a resume finishes it
    for p = 0, 1 do   -- the run stopped 1000 s ago (more than stop_grace)
      local path = string.format("%s/progress-%d.json", out, p)
      local t = metrics.read(path)
      t.beat = require("dpy.host.core").clock() - 1000
      write_file(path, metrics.json.encode(t))
    end
    code, _, err = sh("timeout 60 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. " -q")
    assert.are.equal(0, code, err)
    assert.is_nil(err:find("has not answered", 1, true), err)
  end)

  -- Rewrites checkpoint path with its meta changed by edit(meta).
  local function edit_meta(path, edit)
    local ck = assert(checkpoint.read(path))
    edit(ck.meta)
    local names, ts = {}, {}
    for name, t in pairs(ck.tensors) do
      names[#names + 1] = name
      ts[#ts + 1] = name == "meta" and tensor.from_bytes(require("dpy.serialize").value(ck.meta, "m"), "uint8") or t
    end
    write_file(path, tensor.pickle(names, ts))
  end

  it("--resume refuses a checkpoint file that holds another round than its name says", function()
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 2\ncheckpoint_every = 1\n", "-q")
    assert.are.equal(0, code, err)
    os.remove(out .. "/0.model.pt")   -- something to resume: node 0 stopped before its final model
    -- node 0's checkpoint of round 2 made one of round 1 (as a copy of its older file over it would)
    edit_meta(out .. "/ckpt/0/2.ckpt", function(meta) meta.round = 1 end)
    code, _, err = sh("timeout 60 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. " -q")
    assert.are.equal(1, code, err)
    assert.matches(out .. "/ckpt/0/2.ckpt: a checkpoint of round 1, not of round 2", err, 1, true)
  end)

  it("--resume refuses a checkpoint whose state is of the wrong kind or out of range, naming the field", function()
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 2\ncheckpoint_every = 1\n", "-q")
    assert.are.equal(0, code, err)
    local path = out .. "/ckpt/0/2.ckpt"
    local original = read_file(path)
    local cases = {   -- edit, the words of the refusal
      { function(m) m.loader.pos = -16 end, "loader.pos is -16, where an integer in 0..500 belongs" },
      { function(m) m.loader.pos = 501 end, "loader.pos is 501, where an integer in 0..500 belongs" },
      { function(m) m.loader.epochs = 0.5 end, "loader.epochs is 0.5, where a non-negative integer belongs" },
      { function(m) m.loader.shuffled = "yes" end, 'loader.shuffled is "yes", where a boolean belongs' },
      { function(m) m.trainer.steps = "many" end, 'trainer.steps is "many", where a non-negative integer belongs' },
      { function(m) m.dropped = { 7 } end, "dropped[1] is 7, where an integer in 0..3 belongs" },
      { function(m) m.metrics = 5 end, "metrics is 5, where a table of series belongs" },
      { function(m) m.metrics.train_loss[1] = 3 end,
        "metrics.train_loss[1] is 3, where a {round, value} pair belongs" },
    }
    for _, case in ipairs(cases) do
      write_file(path, original)
      edit_meta(path, case[1])
      os.remove(out .. "/0.model.pt")
      code, _, err = sh("timeout 60 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. " -q")
      assert.are.equal(1, code, case[2] .. ": " .. err)
      assert.matches(path .. ": the checkpoint's " .. case[2], err, 1, true)
    end
    -- a series whose rounds are not numbers (metrics:add takes any) is a checkpoint's as before
    write_file(path, original)
    edit_meta(path, function(m) m.metrics.phase = { { "warmup", 1 } } end)
    code, _, err = sh("timeout 60 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. " -q")
    assert.are.equal(0, code, err)
  end)

  it("a resume that fails before a node's checkpoint is restored leaves that node's metrics as they were", function()
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 2\ncheckpoint_every = 1\n", "-q")
    assert.are.equal(0, code, err)
    os.remove(out .. "/0.model.pt")
    local metrics = read_file(out .. "/0.metrics.json")
    write_file(out .. "/ckpt/0/2.ckpt", "damaged")
    code, _, err = sh("timeout 60 " .. shell_quote(DPY_BIN) .. " run --resume " .. out .. " -q")
    assert.are.equal(1, code, err)
    assert.matches("ckpt/0/2.ckpt: not a checkpoint", err, 1, true)
    assert.are.equal(metrics, read_file(out .. "/0.metrics.json"))
  end)

  it("a resume stopped before the nodes restored: their metrics stay, and it is interrupted after its round",
     function()
    local dir = tmpdir()
    local marker = dir .. "/restoring"
    write_file(dir .. "/slow.lua", string.format([[
local registry = require "dpy.registry"
local host = require "dpy.host.core"
return registry.register { kind = "action", name = "slow_restore", new = function()
  return { checkpoint = function() return {} end,
           restore = function() io.open(%q, "w"):close() host.sleep(3) end }
end }
]], marker))
    local code, _, err, out = run_config(TINY_RUN .. "rounds = 2\ncheckpoint_every = 1\nprocesses = 2\n"
                                         .. string.format("actions = { %q }\n", dir .. "/slow.lua"), "-q")
    assert.are.equal(0, code, err)
    os.remove(out .. "/0.model.pt")
    local before = {}
    for u = 0, 3 do before[u] = read_file(string.format("%s/%d.metrics.json", out, u)) end
    local pid = assert(host.spawn({ DPY_BIN, "run", "--resume", out, "-q" }, dir .. "/resume.out"))
    for _ = 1, 300 do
      if io.open(marker) then break end
      host.sleep(0.1)
    end
    assert.truthy(io.open(marker), read_file(dir .. "/resume.out"))
    host.kill(pid, 15)
    assert.are.equal(143, wait_exit(pid, 60), read_file(dir .. "/resume.out"))
    for u = 0, 3 do
      assert.are.equal(before[u], read_file(string.format("%s/%d.metrics.json", out, u)), "node " .. u)
    end
    assert.are.equal(2, require("dpy.metrics").read(out .. "/manifest.json").interrupted.round)
  end)

  it("an action's checkpoint goes with a restore", function()
    local dir = tmpdir()
    write_file(dir .. "/a.lua", [[
      local registry = require "dpy.registry"
      return registry.register { kind = "action", name = "half",
        new = function() return { checkpoint = function() return {} end } end }
    ]])
    write_file(dir .. "/c.lua", TINY_RUN .. "rounds = 1\nactions = { 'a.lua' }\n")
    local code, _, err = sh(shell_quote(DPY_BIN) .. " run -q " .. dir .. "/c.lua --out " .. dir .. "/out")
    assert.are.equal(1, code)
    assert.matches("action 'half': checkpoint and restore go together", err)
  end)
end)
