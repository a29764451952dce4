-- dpy-lua dispatch against a real OpenSSH server on 127.0.0.1 (tests/ssh/sshd: a non-default port,
-- keys made for the test, its host key in a test known_hosts), reached as two "remotes": the
-- same server under the names 127.0.0.1 and localhost.
local BIN = shell_quote(DPY_BIN)

describe("dpy-lua dispatch", function()
  local dir, keys, port
  local function remotes(extra_defaults, path)
    path = path or dir .. "/remotes.lua"
    write_file(path, string.format([[
return {
  defaults = { port = %d, identity = %q, known_hosts = %q, dpy_lua = %q, %s },
  remotes = {
    { host = "127.0.0.1", work_dir = %q },
    { host = "localhost", address = "127.0.0.1", processes = 2, work_dir = %q },
  },
}
]], port, keys .. "/user_key", keys .. "/known_hosts", DPY_BIN, extra_defaults or "", dir .. "/remote-a",
    dir .. "/remote-b"))
    return path
  end
  local function dispatch(args)
    return sh("cd " .. dir .. " && " .. BIN .. " dispatch c.lua --remotes remotes.lua " .. args)
  end

  setup(function()
    dir = tmpdir()
    keys = dir .. "/keys"
    port = start_sshd(keys)
    write_file(dir .. "/tiny.lua", TINY_RUN)
    write_file(dir .. "/c.lua", "include 'tiny.lua'\n")   -- dispatch uploads what a config includes
  end)

  teardown(function() stop_sshd(keys) end)

  it("runs the processes on the remotes and brings every result back, the numbers of a local run", function()
    remotes()
    local code, out, err = dispatch("--out " .. dir .. "/d1")
    assert.are.equal(0, code, err)
    assert.matches("4 nodes %(dpsgd, 3 processes%)", out)
    -- the last progress line is the run's end, as the summary counts it (not the last poll's)
    local mb = assert(out:match("\n  ([%d.]+) MB exchanged per"), out)
    assert.matches("round 3/3  [^\n]*  " .. mb .. " MB exchanged per node  ETA 0:00\n$", err)
    local rc, _, lerr = sh(BIN .. " run " .. dir .. "/c.lua processes=3 --out " .. dir .. "/local")
    assert.are.equal(0, rc, lerr)
    for uid = 0, 3 do
      assert.matches("done: 3 rounds", read_file(string.format("%s/d1/%d.log", dir, uid)))
      assert.are.same(node_metrics(dir .. "/local", uid).test_accuracy, node_metrics(dir .. "/d1", uid).test_accuracy)
    end
    assert.matches('"launcher":"dispatch"', read_file(dir .. "/d1/manifest.json"))
    assert.are.equal(TINY_RUN, read_file(dir .. "/d1/tiny.lua"), "the run keeps what its config includes")
    assert.matches('%["127.0.0.1:%d+","127.0.0.1:%d+","127.0.0.1:%d+"%]', read_file(dir .. "/d1/addresses.json"))
  end)

  it("asks every remote's dpy-lua side by side, not one remote after the other", function()
    -- a dpy-lua that answers 2 s late (a slow login), noting when it was asked what
    local slow = dir .. "/slow-dpy-lua"
    write_file(slow, string.format('#!/bin/sh\necho "$1 $(date +%%s.%%N)" >> %s/asked\nsleep 2\nexec %s "$@"\n',
                                   dir, BIN))
    assert(os.execute("chmod +x " .. slow))
    remotes(string.format("dpy_lua = %q", slow))
    local code, _, err = dispatch("-q --out " .. dir .. "/slow")
    assert.are.equal(0, code, err)
    local asked = {}
    for t in read_file(dir .. "/asked"):gmatch("%-%-version (%S+)") do asked[#asked + 1] = tonumber(t) end
    assert.are.equal(2, #asked)
    -- side by side: the second asked before the first could answer (2 s after it was asked)
    assert.is_true(math.abs(asked[2] - asked[1]) < 1.8, string.format("asked %.1f s apart", asked[2] - asked[1]))
    for uid = 0, 3 do assert.matches("done: 3 rounds", read_file(string.format("%s/slow/%d.log", dir, uid))) end
  end)

  it("stops on Ctrl-C before any process started (a slow login): exit 130, no Lua location, nothing written", function()
    local slow = dir .. "/slower-dpy-lua"
    local asked = dir .. "/early-asked"
    write_file(slow, string.format('#!/bin/sh\necho >> %s\nsleep 3\nexec %s "$@"\n', asked, BIN))
    assert(os.execute("chmod +x " .. slow))
    remotes(string.format("dpy_lua = %q", slow))
    local host = require "dpy.host.core"
    local out = dir .. "/early"
    local pid = assert(host.spawn({ "/bin/sh", "-c", "cd " .. dir .. " && exec " .. BIN
                                    .. " dispatch c.lua --remotes remotes.lua -q --out " .. out }, dir .. "/early.out"))
    for _ = 1, 300 do   -- until it asks the remotes' dpy-lua its version (a loaded machine takes its time)
      if read_file(asked) then break end
      host.sleep(0.1)
    end
    host.kill(pid, 2)
    local code = wait_exit(pid)
    local text = read_file(dir .. "/early.out")
    assert.are.equal(130, code, text)
    assert.matches("interrupted by SIGINT before any process started", text)
    assert.not_matches("%.lua:%d+:", text)
    assert.is_nil(io.open(out .. "/manifest.json"), "nothing of the run is written")
  end)

  it("lets dpy-lua attach here pause, step and change a node of the remotes, through the SSH sessions #e2e", function()
    remotes()
    local host = require "dpy.host.core"
    local out = dir .. "/d-attach"
    local pid = assert(host.spawn({ "/bin/sh", "-c", "cd " .. dir .. " && exec " .. BIN
                                    .. " dispatch c.lua --remotes remotes.lua -q --paused --out " .. out },
                                  dir .. "/d-attach.out"))
    local client
    for _ = 1, 600 do   -- the forwarded sockets answer once the remote processes listen
      client = require("dpy.attach.client").open(out)
      if client and next(client.where) and #client.conns == 3 then break end
      if client then for _, c in ipairs(client.conns) do c:close() end end
      client = nil
      host.sleep(0.1)
    end
    assert(client, "dispatch never listened: " .. tostring(read_file(dir .. "/d-attach.out")))
    for _, c in ipairs(client.conns) do c:close() end
    local input = dir .. "/attach.in"
    write_file(input, "step(1)\nround\noptimizer:set_lr(0.02)\noptimizer\nresume()\n")
    local code, o, e = sh(string.format("timeout 120 %s attach %s --uid 3 < %s", BIN, out, input))
    assert.are.equal(0, code, e)
    assert.matches("paused: every node has finished round 1", o, 1, true)
    assert.matches("\n1\n", o, 1, true)
    assert.matches("lr=0.02", o, 1, true)
    assert.are.equal(0, wait_exit(pid), read_file(dir .. "/d-attach.out"))
    assert.matches("attach: round 1: optimizer:set_lr(0.02)", read_file(out .. "/3.log"), 1, true)
    assert.matches("optimizer:set_lr(0.02)", read_file(out .. "/attach/3.jsonl"), 1, true)
    assert.matches('"attached":%[', read_file(out .. "/manifest.json"))
    assert.is_nil(io.open(out .. "/attach/p0.sock"), "the forwarded sockets go with the run")
  end)

  it("runs each time in a fresh remote directory, and brings back only this run's files", function()
    remotes()
    local host = require "dpy.host.core"
    -- what an earlier run into the same --out left on the remotes, as dispatch once laid them out
    for _, remote in ipairs { "remote-a", "remote-b" } do
      assert(host.mkdir_p(string.format("%s/%s/d5", dir, remote)))
      write_file(string.format("%s/%s/d5/7.log", dir, remote), "a node of an earlier run\n")
      write_file(string.format("%s/%s/d5/process-5.out", dir, remote), "an earlier process\n")
    end
    local code, _, err = dispatch("-q --out " .. dir .. "/d5")
    assert.are.equal(0, code, err)
    local run_id = read_file(dir .. "/d5/manifest.json"):match('"run_id":(%d+)')
    for _, remote in ipairs { "remote-a", "remote-b" } do
      assert.truthy(read_file(string.format("%s/%s/d5-%s/config.effective.lua", dir, remote, run_id)), remote)
    end
    assert.is_nil(read_file(dir .. "/d5/7.log"), "an earlier run's log was collected")
    assert.is_nil(read_file(dir .. "/d5/process-5.out"))
    for uid = 0, 3 do assert.matches("done: 3 rounds", read_file(string.format("%s/d5/%d.log", dir, uid))) end
    -- again, replacing it: another remote directory, the same numbers
    code, _, err = dispatch("-q --force --out " .. dir .. "/d5")
    assert.are.equal(0, code, err)
    local again = read_file(dir .. "/d5/manifest.json"):match('"run_id":(%d+)')
    assert.are_not.equal(run_id, again)
    assert.truthy(read_file(string.format("%s/remote-a/d5-%s/config.effective.lua", dir, again)))
  end)

  it("ships every file the run uses, where the config finds them, and records them in the run directory", function()
    remotes()
    assert(require("dpy.host.core").mkdir_p(dir .. "/parts"))
    assert(require("dpy.host.core").mkdir_p(dir .. "/acts"))
    write_file(dir .. "/parts/tiny.lua", TINY_RUN)
    write_file(dir .. "/parts/base.lua", "include 'tiny.lua'\nrounds = 2\n")   -- relative to parts/
    write_file(dir .. "/acts/noisy.lua", read_file(REPO .. "/configs/actions/noisy_model.lua"))
    write_file(dir .. "/ship.lua", "include 'parts/base.lua'\n"
                                   .. "actions = { { 'acts/noisy.lua', nodes = { 1 }, sigma = 0.5 } }\n")
    local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " dispatch ship.lua --remotes remotes.lua -q --out "
                            .. dir .. "/d3")
    assert.are.equal(0, code, err)
    assert.matches("noisy_model: sending models with noise", read_file(dir .. "/d3/1.log"))
    local run_id = read_file(dir .. "/d3/manifest.json"):match('"run_id":(%d+)')
    for _, remote in ipairs { "remote-a", "remote-b" } do
      for _, f in ipairs { "parts/base.lua", "parts/tiny.lua", "acts/noisy.lua" } do
        assert.are.equal(read_file(dir .. "/" .. f), read_file(string.format("%s/%s/d3-%s/%s", dir, remote, run_id, f)),
                         remote .. ": " .. f)
      end
    end
    for _, f in ipairs { "parts/base.lua", "parts/tiny.lua", "acts/noisy.lua", "config.effective.lua" } do
      assert.truthy(read_file(dir .. "/d3/" .. f), "the run directory keeps " .. f)
    end
  end)

  it("repeats the experiment with --jobs, seeds seed, seed + 1, ... #e2e", function()
    remotes()
    local code, _, err = dispatch("-q --jobs 2 --out " .. dir .. "/jobs")
    assert.are.equal(0, code, err)
    local s1 = read_file(dir .. "/jobs/job-1/manifest.json"):match('"seed":(%d+)')
    local s2 = read_file(dir .. "/jobs/job-2/manifest.json"):match('"seed":(%d+)')
    assert.are.equal("2", s1)
    assert.are.equal("3", s2)
    assert.truthy(node_metrics(dir .. "/jobs/job-2", 3))
  end)

  -- The series that do not measure time, of every node of a run directory.
  local TIMED = { train_seconds = true, exchange_seconds = true, wall_seconds = true, ready_seconds = true }
  local function values(out)
    local all = {}
    for u = 0, 3 do
      for name, series in pairs(assert(node_metrics(out, u), out .. ": node " .. u)) do
        if not TIMED[name] then all[u .. "." .. name] = series end
      end
    end
    return all
  end

  it("--resume continues a run from its last checkpoint, ending bit for bit as the run that was not #e2e", function()
    remotes()
    local tensor = require "dpy.tensor"
    -- an action that SIGKILLs node 0's process as its round 3 (the last) starts, unless marker exists
    local function job(name, marker)
      local sub = dir .. "/" .. name
      assert(require("dpy.host.core").mkdir_p(sub))
      write_file(sub .. "/tiny.lua", TINY_RUN)
      write_file(sub .. "/c.lua", "include 'tiny.lua'\ncheckpoint_every = 1\nmodel = { 'mlp', hidden = { 8 } }\n"
                 .. action_config("kill_once", "pre_train", string.format([[
                      if node.uid ~= 0 or r ~= 3 or io.open(%q) then return end
                      io.open(%q, "w"):close()
                      host.kill(host.pid(), 9)]], marker, marker)))
      return sub
    end
    -- the reference: the same run, uninterrupted, dispatched too: the remote's processes run in the
    -- environment its SSH sessions get, which may pick other BLAS kernels than this shell's (an
    -- OPENBLAS_CORETYPE set here and not there: other bits on a CPU with AVX-512)
    local ref = job("ref", dir .. "/ref/never")
    write_file(dir .. "/ref/never", "")
    local code, _, err = sh("cd " .. ref .. " && " .. BIN .. " dispatch c.lua --remotes ../remotes.lua -q --out out")
    assert.are.equal(0, code, err)

    local sub = job("again", dir .. "/again/killed")
    code, _, err = sh("cd " .. sub .. " && " .. BIN .. " dispatch c.lua --remotes ../remotes.lua -q --out out")
    assert.are.equal(1, code, err)
    assert.truthy(read_file(sub .. "/killed"), "the first attempt was killed: " .. err)
    assert.is_nil(read_file(sub .. "/out/0.model.pt"), "the first attempt did not finish")
    -- brought back: the checkpoint of the last round every node finished (2, or 1 when the failure
    -- notice reached a node still in round 2)
    local round = require("dpy.checkpoint").resume_round(sub .. "/out", 4)
    assert.truthy(round == 1 or round == 2, "the checkpoints came back")
    code, _, err = sh("cd " .. sub .. " && " .. BIN .. " dispatch --resume out --remotes ../remotes.lua rounds=9")
    assert.are.equal(2, code)
    assert.matches("no %-%-out, %-%-seed, %-%-force, %-%-jobs, %-%-processes or KEY=VALUE", err)
    assert(require("dpy.host.core").mkdir_p(dir .. "/bare"))   -- a run directory without checkpoints
    write_file(dir .. "/bare/config.effective.lua", TINY_RUN)
    code, _, err = sh("cd " .. dir .. " && " .. BIN .. " dispatch --resume bare --remotes remotes.lua")
    assert.are.equal(1, code)
    assert.matches("bare: node 0 has no checkpoint", err)
    -- as when dispatch itself died before collecting: the checkpoints are still on the remotes,
    -- beside files under a checkpoint's name that are none (empty), which count for nothing
    sh("rm -r " .. sub .. "/out/ckpt")
    sh("find " .. dir .. "/remote-a " .. dir .. "/remote-b -type d -path '*/ckpt/*' "
       .. "-exec sh -c ': > \"$1/999.ckpt\"' sh {} \\;")
    local out
    code, out, err = sh("cd " .. sub .. " && " .. BIN .. " dispatch --resume out --remotes ../remotes.lua")
    assert.are.equal(0, code, err)
    assert.matches("resuming out from round " .. round, out)

    assert.are.same(values(ref .. "/out"), values(sub .. "/out"))
    for u = 0, 3 do
      local names, a = tensor.unpickle(assert(read_file(string.format("%s/out/%d.model.pt", ref, u))))
      local names2, b = tensor.unpickle(assert(read_file(string.format("%s/out/%d.model.pt", sub, u))))
      assert.are.same(names, names2)
      for i = 1, #a do assert.is_true(a[i]:eq(b[i]):all():item(), u .. ": " .. names[i]) end
    end
    assert.matches("round 1:.*resumed from the checkpoint of round " .. round .. ".*done: 3 rounds",
                   read_file(sub .. "/out/0.log"))
    local manifest = require("dpy.metrics").read(sub .. "/out/manifest.json")
    assert.are.equal(1, #manifest.resumed)
    assert.are.equal(round, manifest.resumed[1].round)
  end)

  it("runs --jobs side by side on free remotes with --processes, seeds seed, seed + 1 #e2e", function()
    remotes()
    -- each job's node 0 waits in round 1 for the other job: jobs one after the other would fail
    write_file(dir .. "/side.lua", "include 'tiny.lua'\n" .. action_config("side", "pre_train", string.format([[
      if node.uid ~= 0 or r ~= 1 then return end
      io.open(%q .. node.cfg.seed, "w"):close()
      for _ = 1, 150 do
        if io.open(%q .. (node.cfg.seed == 2 and 3 or 2)) then return end
        host.sleep(0.1)
      end
      error("the other job never ran beside this one")]], dir .. "/side-", dir .. "/side-")))
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " dispatch side.lua --remotes remotes.lua -q "
                              .. "--jobs 2 --processes 1 --out " .. dir .. "/side")
    assert.are.equal(0, code, err)
    assert.matches("4 nodes %(dpsgd, 1 process%)", out)
    for j, remote in ipairs { "remote-a", "remote-b" } do   -- job 1 on the first remote, job 2 on the second
      local manifest = require("dpy.metrics").read(string.format("%s/side/job-%d/manifest.json", dir, j))
      assert.are.equal(j + 1, manifest.seed)
      assert.truthy(read_file(string.format("%s/%s/job-%d-%d/config.effective.lua", dir, remote, j, manifest.run_id)))
    end
    local rc, _, lerr = sh(BIN .. " run -q " .. dir .. "/side.lua --seed 3 --out " .. dir .. "/side-local")
    assert.are.equal(0, rc, lerr)
    assert.are.same(node_metrics(dir .. "/side-local", 2).test_accuracy,
                    node_metrics(dir .. "/side/job-2", 2).test_accuracy)
    code, _, err = dispatch("--jobs 2 --processes 4 --out " .. dir .. "/x")
    assert.are.equal(2, code)
    assert.matches("%-%-processes 4: the remotes have 3", err)
    code, _, err = dispatch("--processes 0 --out " .. dir .. "/x")
    assert.are.equal(2, code)
    assert.matches("%-%-processes: an integer >= 1 expected", err)
  end)

  it("refuses a remotes file whose values are of the wrong kind, naming the file, the remote and the key", function()
    local load_remotes = require("dpy.dispatch").load_remotes
    local path = dir .. "/typed.lua"
    for _, case in ipairs {
      { "{ host = 'a', user = false }", "remotes%[1%]: option 'user' must be a string, got boolean false" },
      { "{ host = 'a', base_port = 'x' }", "remotes%[1%]: option 'base_port' must be an integer" },
      { "{ host = 'a', port = 70000 }", "remotes%[1%]: option 'port' must be an integer >= 1 and <= 65535" },
      { "{ host = 'a', identity = 7 }", "remotes%[1%]: option 'identity' must be a string" },
      { "{ host = 'a' }, { host = 'b', work_dir = {} }", "remotes%[2%]: option 'work_dir' must be a string" },
    } do
      write_file(path, "return { remotes = { " .. case[1] .. " } }\n")
      local ok, err = pcall(load_remotes, path)
      assert.is_false(ok, case[1])
      assert.matches("^" .. path:gsub("%p", "%%%0") .. ": " .. case[2], err)
    end
    -- an integral float is the integer, as in a config (a JSON decoder's numbers are floats)
    write_file(path, "return { defaults = { port = 22.0 }, remotes = { { host = 'a', processes = 4.0 } } }\n")
    local loaded = load_remotes(path)
    assert.are.equal(4, loaded[1].processes)
    assert.are.equal("integer", math.type(loaded[1].processes))
    assert.are.equal("integer", math.type(loaded[1].port))
    write_file(path, "return { defaults = { port = '22' }, remotes = { { host = 'a' } } }\n")
    local ok, err = pcall(load_remotes, path)
    assert.is_false(ok)
    assert.matches(": defaults: option 'port' must be an integer", err)
    -- a remotes file may say what is missing with error()
    write_file(path, "error('set DPY_NODES', 0)\n")
    ok, err = pcall(load_remotes, path)
    assert.is_false(ok)
    assert.matches("set DPY_NODES", err)
    -- from the command line: exit 2, before anything is written
    write_file(path, "return { remotes = { { host = '127.0.0.1', base_port = 'x' } } }\n")
    local code, _, e = sh("cd " .. dir .. " && " .. BIN .. " dispatch c.lua --remotes typed.lua --out "
                          .. dir .. "/typed")
    assert.are.equal(2, code, e)
    assert.matches("typed%.lua: remotes%[1%]: option 'base_port'", e)
    assert.is_nil(io.open(dir .. "/typed/manifest.json"))
    -- none at all (a first dispatch, remotes.lua by default): says how to make one
    local bare = tmpdir()
    write_file(bare .. "/c.lua", TINY_RUN)
    code, _, e = sh("cd " .. bare .. " && " .. BIN .. " dispatch c.lua --out " .. bare .. "/none")
    assert.are.equal(2, code, e)
    assert.matches("cannot open remotes%.lua: No such file or directory %(copy remotes%.example%.lua", e)
  end)

  it("refuses --jobs below 1 as --processes is refused (exit 2), before it reads a remote", function()
    for _, j in ipairs { "0", "-2" } do
      local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " dispatch c.lua --remotes none.lua --jobs=" .. j)
      assert.are.equal(2, code, err)
      assert.matches("%-%-jobs: an integer >= 1 expected", err)
    end
  end)

  it("refuses an unknown or changed host key, a wrong key, a remote without dpy-lua or of another build", function()
    write_file(dir .. "/empty_known_hosts", "")
    remotes(string.format("known_hosts = %q", dir .. "/empty_known_hosts"))
    local code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("remote 127.0.0.1 %(127.0.0.1%): 127.0.0.1:%d+: its host key SHA256:%S+ is not in "
                   .. ".*empty_known_hosts: refusing to connect", err)

    local other = read_file(keys .. "/other_key.pub")
    write_file(dir .. "/changed_known_hosts", string.format("[127.0.0.1]:%d %s", port, other))
    remotes(string.format("known_hosts = %q", dir .. "/changed_known_hosts"))
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("the host key CHANGED", err)

    remotes(string.format("identity = %q", keys .. "/other_key"))
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("authentication failed %(key .*other_key%)", err)

    remotes("backend = 'cuda'")
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("backend cuda asked, but its dpy%-lua sees no GPU %(devices: cpu", err)

    -- another build of the same version (its Lua tree edited) would give other numbers
    assert.are.equal(0, (sh("cp -r " .. shell_quote(REPO .. "/lua") .. " " .. dir .. "/lua2 && echo '-- edited' >> "
                            .. dir .. "/lua2/dpy/random.lua")))
    write_file(dir .. "/other-build", string.format("#!/bin/sh\nDPY_LUA_PATH=%s/lua2 exec %s \"$@\"\n", dir, BIN))
    assert.are.equal(0, (sh("chmod +x " .. dir .. "/other-build")))
    remotes(string.format("dpy_lua = %q", dir .. "/other-build"))
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    local mine = select(2, sh(BIN .. " --version")):match("\nbuild (%x+)")
    local theirs = select(2, sh(dir .. "/other-build --version")):match("\nbuild (%x+)")
    assert.matches(string.format("remote 127.0.0.1 (127.0.0.1): dpy-lua 0.1.0 build %s expected, found build %s",
                                 mine, theirs), err, 1, true)
    assert.is_nil(io.open(dir .. "/x/manifest.json"))

    remotes("dpy_lua = '/nonexistent/dpy-lua'")
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("dpy%-lua not found %(ran '/nonexistent/dpy%-lua'", err)
  end)

  it("stops every remote process when one dies, and collects what finished", function()
    remotes()
    write_file(dir .. "/crash.lua", [[
      local registry = require "dpy.registry"
      local host = require "dpy.host.core"
      return registry.register { kind = "action", name = "crash",
        new = function() return { pre_train = function(node, r)
          if node.uid == 3 and r == 2 then host.kill(host.pid(), 9) end end } end }
    ]])
    write_file(dir .. "/c.lua", "include 'tiny.lua'\nactions = { 'crash.lua' }\n")
    local code, _, err = dispatch("-q --out " .. dir .. "/crash")
    write_file(dir .. "/c.lua", "include 'tiny.lua'\n")
    assert.are.equal(1, code)
    assert.matches("process 2 on localhost %(localhost%) exited with 137", err)
    assert.is_true(#node_metrics(dir .. "/crash", 0).train_loss >= 1, "node 0's results came back")
    local run_id = read_file(dir .. "/crash/manifest.json"):match('"run_id":(%d+)')
    local rc = sh("pgrep -f '[-]-run-id " .. run_id .. "'")   -- [-]: not pgrep's own shell
    assert.are_not.equal(0, rc, "no process of the run is left")
  end)

  it("runs more processes on one remote than sshd's MaxSessions (10) lets one connection have", function()
    local path = dir .. "/remotes-many.lua"
    write_file(path, string.format([[
return {
  defaults = { port = %d, identity = %q, known_hosts = %q, dpy_lua = %q },
  remotes = { { host = "127.0.0.1", processes = 12, work_dir = %q } },
}
]], port, keys .. "/user_key", keys .. "/known_hosts", DPY_BIN, dir .. "/remote-many"))
    write_file(dir .. "/many.lua", "include 'tiny.lua'\nnodes = 12\nrounds = 1\nlocal_steps = 1\n"
               .. "train_samples = 1200\ntest_samples = 50\n")
    local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " dispatch many.lua --remotes remotes-many.lua -q --out "
                            .. dir .. "/many")
    assert.are.equal(0, code, err)
    for uid = 0, 11 do assert.matches("done: 1 rounds", read_file(string.format("%s/many/%d.log", dir, uid))) end
  end)

  it("names why a remote process could not start: its port is taken", function()
    -- the second remote's processes are to listen on the test sshd's own port (and the next)
    local path = remotes()
    write_file(path, (read_file(path):gsub('(work_dir = "[^"]*remote%-b")', "%1, base_port = " .. port)))
    local t0 = os.time()
    local code, _, err = dispatch("-q --out " .. dir .. "/taken stop_grace=3")
    assert.are.equal(1, code)
    assert.matches("process 1 on localhost %(localhost%) exited with 1: .*listen on 127%.0%.0%.1:" .. port
                   .. ": Address already in use", err)
    assert.not_matches("exited with 137", err)
    assert.is_true(os.time() - t0 < 120, "took " .. (os.time() - t0) .. " s")   -- no hang (the sanitizer build is slow)
  end)

  for _, case in ipairs { { "INT", "SIGINT", 130 }, { "TERM", "SIGTERM", 143 } } do
    it(string.format("stops everywhere on SIG%s, exits %d, keeps what was written #e2e", case[1], case[3]), function()
      remotes()
      local long = dir .. "/long-" .. case[1]
      write_file(long .. ".sh", string.format("cd %s && %s dispatch c.lua --remotes remotes.lua -q --out %s "
                 .. "rounds=10000 eval_every=1 >%s.out 2>&1 &\necho $! >%s.pid\nwait $!\necho $? >%s.code\n",
                 dir, BIN, long, long, long, long))
      os.execute("sh " .. long .. ".sh >/dev/null 2>&1 &")
      for _ = 1, 300 do   -- until a node has finished a round
        local m = read_file(long .. "/progress-0.json")
        if m and not m:match('"round":0') then break end
        os.execute("sleep 0.1")
      end
      require("dpy.host.core").kill(tonumber(read_file(long .. ".pid")), case[1] == "INT" and 2 or 15)
      for _ = 1, 300 do
        if read_file(long .. ".code") then break end
        os.execute("sleep 0.1")
      end
      assert.are.equal(case[3] .. "\n", read_file(long .. ".code"), read_file(long .. ".out"))
      assert.matches("interrupted by " .. case[2] .. "; the results so far are in", read_file(long .. ".out"))
      assert.not_matches("exited with", read_file(long .. ".out"), "an interrupted process is no failure")
      assert.truthy(read_file(long .. "/0.log"))
      local manifest = require("dpy.metrics").read(long .. "/manifest.json")
      assert.are.equal(case[2], manifest.interrupted and manifest.interrupted.signal)
      assert.is_true(manifest.interrupted.round >= 1)
      assert.is_true(#node_metrics(long, 0).test_accuracy >= manifest.interrupted.round)
      assert.are_not.equal(0, (sh("pgrep -f '[-]-run-id " .. manifest.run_id .. "'")))
    end)
  end

  it("takes its remote processes with it when dispatch itself is killed (SIGKILL: its sessions close)", function()
    remotes()
    local host = require "dpy.host.core"
    local out = dir .. "/killed"
    local pid = assert(host.spawn({ "/bin/sh", "-c", "cd " .. dir .. " && exec " .. BIN
                                    .. " dispatch c.lua --remotes remotes.lua -q rounds=10000 --out " .. out },
                                  dir .. "/killed.out"))
    local running
    for _ = 1, 300 do   -- until a node has finished a round: every process runs
      local m = read_file(out .. "/progress-0.json")
      running = m and not m:match('"round":0')
      if running then break end
      host.sleep(0.1)
    end
    assert.truthy(running, "no round done: " .. tostring(read_file(dir .. "/killed.out")))
    local run_id = read_file(out .. "/manifest.json"):match('"run_id":(%d+)')
    host.kill(pid, 9)
    wait_exit(pid)
    local left = 0
    for _ = 1, 200 do   -- the nodes get SIGTERM and stop, saving what they have
      left = sh("pgrep -f '[-]-run-id " .. run_id .. "'")
      if left ~= 0 then break end
      host.sleep(0.1)
    end
    sh("pkill -9 -f '[-]-run-id " .. run_id .. "'")
    assert.are_not.equal(0, left, "a remote process of the run still runs 20 s after dispatch was killed")
  end)

  it("brings back the results of a remote whose session dropped, over a new one #e2e", function()
    remotes()
    local host = require "dpy.host.core"
    local out = dir .. "/dropped"
    local pid = assert(host.spawn({ "/bin/sh", "-c", "cd " .. dir .. " && exec " .. BIN .. " dispatch c.lua "
                                    .. "--remotes remotes.lua -q rounds=10000 eval_every=1 --out " .. out },
                                  dir .. "/dropped.out"))
    local run_id, rdir
    for _ = 1, 300 do   -- until process 1 (on the second remote) has finished a round
      run_id = run_id or (read_file(out .. "/manifest.json") or ""):match('"run_id":(%d+)')
      rdir = run_id and string.format("%s/remote-b/dropped-%s", dir, run_id)
      local m = read_file(out .. "/progress-1.json")
      if m and not m:match('"round":0') then break end
      host.sleep(0.1)
    end
    -- the sshd process that serves the session: the parent of the shell that waits for process 1
    local node = read_file(rdir .. "/pid-1"):match("%d+")
    local shell = read_file("/proc/" .. node .. "/stat"):match("^%d+ %b() %S+ (%d+)")
    local sshd = read_file("/proc/" .. shell .. "/stat"):match("^%d+ %b() %S+ (%d+)")
    assert.matches("sshd", read_file("/proc/" .. sshd .. "/cmdline"))
    host.kill(tonumber(sshd), 9)
    local code = wait_exit(pid)
    local text = read_file(dir .. "/dropped.out")
    sh("pkill -9 -f '[-]-run-id " .. run_id .. "'")
    assert.are.equal(1, code, text)
    assert.matches("process 1 on localhost %(localhost%) lost its connection", text)
    for uid = 2, 3 do
      local m = node_metrics(out, uid)
      assert.is_true(m and #m.test_accuracy >= 1, "node " .. uid .. "'s results came back: " .. text)
    end
  end)

  it("sends SIGKILL stop_grace seconds after SIGTERM to a remote process that does not stop #e2e", function()
    remotes()
    -- node 3 never ends its round 2 (its process still answers): SIGTERM cannot stop it
    write_file(dir .. "/stuck.lua", "include 'tiny.lua'\npeer_timeout = 60\nstop_grace = 2\n"
               .. action_config("stuck", "pre_train", "if node.uid == 3 and r == 2 then host.sleep(300) end"))
    local stuck = dir .. "/stuck"
    write_file(stuck .. ".sh", string.format("cd %s && %s dispatch stuck.lua --remotes remotes.lua -q --out %s "
               .. ">%s.out 2>&1 &\necho $! >%s.pid\nwait $!\necho $? >%s.code\n", dir, BIN, stuck, stuck, stuck, stuck))
    os.execute("sh " .. stuck .. ".sh >/dev/null 2>&1 &")
    for _ = 1, 300 do   -- until node 3 (process 2's one node) is stuck in round 2
      local m = read_file(stuck .. "/progress-2.json")
      if m and not m:match('"round":0') then break end
      os.execute("sleep 0.1")
    end
    os.execute("sleep 1")
    local host = require "dpy.host.core"
    local t0 = host.clock()
    host.kill(tonumber(read_file(stuck .. ".pid")), 2)
    for _ = 1, 600 do
      if read_file(stuck .. ".code") then break end
      os.execute("sleep 0.1")
    end
    local seconds = host.clock() - t0
    local run_id = read_file(stuck .. "/manifest.json"):match('"run_id":(%d+)')
    local left = sh("pgrep -f '[-]-run-id " .. run_id .. "'")
    sh("pkill -9 -f '[-]-run-id " .. run_id .. "'")
    assert.are.equal("130\n", read_file(stuck .. ".code"), read_file(stuck .. ".out"))
    assert.is_true(seconds < 45, string.format("took %.1f s", seconds))   -- not the 300 s of node 3's sleep
    assert.matches("SIGKILL to process 2 on localhost %(localhost%), still running 2 s after SIGTERM",
                   read_file(stuck .. ".out"))
    assert.are_not.equal(0, left, "no process of the run is left")
  end)

  it("stops a remote process that stopped answering: SIGTERM, then SIGKILL after stop_grace #e2e", function()
    remotes()
    write_file(dir .. "/hang.lua", "include 'tiny.lua'\npeer_timeout = 60\nstop_grace = 2\n"
               .. action_config("hang", "pre_train", "if node.uid == 3 and r == 2 then host.kill(host.pid(), 19) end"))
    local t0 = require("dpy.host.core").clock()
    local code, _, err = sh("cd " .. dir .. " && timeout -s KILL 50 " .. BIN
                            .. " dispatch hang.lua --remotes remotes.lua -q --out " .. dir .. "/hang")
    local seconds = require("dpy.host.core").clock() - t0
    local run_id = (read_file(dir .. "/hang/manifest.json") or ""):match('"run_id":(%d+)')
    if run_id then sh("pkill -9 -f '[-]-run-id " .. run_id .. "'") end
    assert.are.equal(1, code, err)
    assert.is_true(seconds < 40, string.format("took %.1f s", seconds))
    assert.matches("process 2 on localhost %(localhost%) has not answered for %d+ s: stopping it", err)
    assert.matches("SIGKILL to process 2 on localhost %(localhost%), still running 2 s after SIGTERM", err)
    assert.matches("process 2 on localhost %(localhost%) exited with 137", err)
    for uid = 0, 1 do assert.is_true(#node_metrics(dir .. "/hang", uid).test_accuracy >= 1, "node " .. uid) end
  end)
end)
