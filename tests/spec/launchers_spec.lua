-- Runs started by the launchers clusters already have: mpirun (Open MPI from Debian) and the
-- environment srun (Slurm) gives each task.
local BIN = shell_quote(DPY_BIN)

local function same_numbers(a, b)
  for uid = 0, 3 do
    assert.are.same(node_metrics(a, uid).test_accuracy, node_metrics(b, uid).test_accuracy, "node " .. uid)
  end
end

describe("launchers #e2e", function()
  local dir, reference
  setup(function()
    dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN)
    local code, _, err = sh(BIN .. " run " .. dir .. "/c.lua processes=4 --out " .. dir .. "/reference")
    assert.are.equal(0, code, err)
    reference = dir .. "/reference"
  end)

  it("mpirun -np 4 runs the nodes, the same numbers as dpy-lua run", function()
    local code, out, err = sh("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 "
                              .. "--oversubscribe " .. BIN .. " node " .. dir .. "/c.lua --dir " .. dir .. "/mpi")
    assert.are.equal(0, code, err)
    assert.matches("results in " .. dir .. "/mpi", out, 1, true)
    -- the summary, as `run` prints it: the honest nodes and the final accuracy over them
    local _, ref_out = sh(BIN .. " run " .. reference .. " --out " .. dir .. "/again -q")
    assert.matches("4 nodes %(dpsgd, 4 processes%), 3 rounds in", out)
    assert.matches("honest nodes: 4 of 4", out)
    assert.are.equal(ref_out:match("final test accuracy[^\n]*"), out:match("final test accuracy[^\n]*"))
    assert.is_nil(out:find("had not finished", 1, true))
    same_numbers(reference, dir .. "/mpi")
    local manifest = read_file(dir .. "/mpi/manifest.json")
    assert.matches('"launcher":"mpirun %(Open MPI%)"', manifest)
    assert.matches('"processes":4', manifest)
  end)

  -- each rank wrote a line per failed node: 64 lines at 64 nodes for one misspelt event, without its file
  it("mpirun: a rank says its nodes' failure once, naming a misspelt event's file and line", function()
    write_file(dir .. "/typo.lua", 'return require("dpy.registry").register { kind = "action", name = "typo",\n'
                                   .. "  new = function() return {\n"
                                   .. "    post_trian = function() end } end }\n")
    write_file(dir .. "/t.lua", TINY_RUN .. "actions = { '" .. dir .. "/typo.lua' }\n")
    local code, _, err = sh("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "
                            .. "--oversubscribe " .. BIN .. " node " .. dir .. "/t.lua --dir " .. dir .. "/typo")
    assert.are_not.equal(0, code, err)
    assert.is_nil(err:find("node %d failed"), err)
    local lines = 0
    for line in err:gmatch("dpy%-lua: nodes [^\n]*") do
      lines = lines + 1
      assert.matches("^dpy%-lua: nodes [0-3]%-[0-3] failed: .*typo%.lua:3: action 'typo': unknown event 'post_trian' "
                     .. "%(did you mean 'post_train'%?%)", line)
    end
    assert.are.equal(2, lines, err)   -- one a rank
  end)

  it("reads srun's task variables, and names the ranks that never arrive", function()
    local procs = {}
    for r = 0, 3 do
      procs[#procs + 1] = string.format("SLURM_PROCID=%d SLURM_NTASKS=4 SLURM_JOB_ID=77 %s node %s/c.lua "
                                        .. "--dir %s/slurm", r, BIN, dir, dir)
    end
    local code, _, err = sh("(" .. table.concat(procs, " & ") .. " & wait) 2>&1")
    assert.are.equal(0, code, err)
    same_numbers(reference, dir .. "/slurm")
    assert.matches('"launcher":"srun %(Slurm%)"', read_file(dir .. "/slurm/manifest.json"))

    -- a second launch into the same directory (another step of the job) reads none of the first
    -- one's rendezvous files, and replaces its results only with --force
    local function launch(step, extra, delay0)
      local ps = {}
      for r = 0, 3 do
        ps[#ps + 1] = string.format("(%sDPY_RENDEZVOUS_TIMEOUT=30 SLURM_PROCID=%d SLURM_NTASKS=4 SLURM_JOB_ID=77 "
                                    .. "SLURM_STEP_ID=%d %s node %s/c.lua --dir %s/slurm %s > %s/r%d.out 2>&1; "
                                    .. "echo $? > %s/r%d.code)", r == 0 and delay0 and "sleep " .. delay0 .. "; " or "",
                                    r, step, BIN, dir, dir, extra, dir, r, dir, r)
      end
      local t0 = os.time()
      sh("(" .. table.concat(ps, " & ") .. " & wait)")
      local codes = {}
      for r = 0, 3 do codes[r + 1] = tonumber(read_file(string.format("%s/r%d.code", dir, r))) end
      return codes, os.time() - t0
    end
    local codes, took = launch(1, "--seed 9")
    assert.are.same({ 2, 1, 1, 1 }, codes)
    assert.is_true(took < 20, "the other ranks heard of rank 0's refusal at once: " .. took .. " s")
    assert.matches("slurm holds a run already: choose another %-%-dir, or add %-%-force", read_file(dir .. "/r0.out"))
    assert.matches("rank 0: .*slurm holds a run already", read_file(dir .. "/r3.out"))
    assert.matches('"seed":2', read_file(dir .. "/slurm/manifest.json"), "the first run stays")
    codes = launch(2, "--seed 9 --force", 2)   -- rank 0 late: the others wait for it, not for the old files
    assert.are.same({ 0, 0, 0, 0 }, codes, read_file(dir .. "/r1.out"))
    assert.matches('"seed":9', read_file(dir .. "/slurm/manifest.json"))
    local launches = require("dpy.paths").list(dir .. "/slurm/rendezvous")
    assert.are.equal(1, #launches, "only this launch's rendezvous is left")
    for uid = 0, 3 do assert.truthy(node_metrics(dir .. "/slurm", uid)) end

    -- ranks started with different overrides (or configs, or files) are refused before rank 0 writes anything
    local mixed = {}
    for r = 0, 1 do
      mixed[#mixed + 1] = string.format("(DPY_RENDEZVOUS_TIMEOUT=30 SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_JOB_ID=78 %s "
                                        .. "node %s/c.lua --dir %s/mixed %s > %s/m%d.out 2>&1; echo $? > %s/m%d.code)",
                                        r, BIN, dir, dir, r == 1 and "'optimizer={\"sgd\",lr=0.5}'" or "", dir, r,
                                        dir, r)
    end
    sh("(" .. table.concat(mixed, " & ") .. " & wait)")
    assert.are.equal("2\n", read_file(dir .. "/m0.code"), read_file(dir .. "/m0.out"))
    assert.are.equal("1\n", read_file(dir .. "/m1.code"), read_file(dir .. "/m1.out"))
    assert.matches('rank 1 runs another config than rank 0: optimizer = { "sgd", lr = 0.5 } where rank 0 has '
                   .. 'optimizer = { "sgd", lr = 0.01, momentum = 0.9 }', read_file(dir .. "/m0.out"), 1, true)
    assert.matches("rank 0: rank 1 runs another config", read_file(dir .. "/m1.out"), 1, true)
    assert.is_nil(io.open(dir .. "/mixed/manifest.json"), "nothing of the run is written")

    -- a rank of another build (here its Lua tree differs by a line) would give other numbers: refused by name
    assert.are.equal(0, (sh("cp -r " .. shell_quote(REPO .. "/lua") .. " " .. dir .. "/lua2 && echo '-- edited' >> "
                            .. dir .. "/lua2/dpy/random.lua")))
    local builds, ranks = {}, {}
    for r = 0, 1 do
      local env = r == 1 and "DPY_LUA_PATH=" .. dir .. "/lua2 " or ""
      builds[r] = select(2, sh(env .. BIN .. " --version")):match("\nbuild (%x+)")
      ranks[#ranks + 1] = string.format("(%sDPY_RENDEZVOUS_TIMEOUT=30 SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_JOB_ID=79 "
                                        .. "%s node %s/c.lua --dir %s/builds > %s/b%d.out 2>&1; echo $? > %s/b%d.code)",
                                        env, r, BIN, dir, dir, dir, r, dir, r)
    end
    sh("(" .. table.concat(ranks, " & ") .. " & wait)")
    assert.are.equal("2\n", read_file(dir .. "/b0.code"), read_file(dir .. "/b0.out"))
    assert.are.equal("1\n", read_file(dir .. "/b1.code"), read_file(dir .. "/b1.out"))
    assert.matches(string.format("rank 1 runs another build of dpy-lua than rank 0: build %s where rank 0 has build %s",
                                 builds[1], builds[0]), read_file(dir .. "/b0.out"), 1, true)
    assert.is_nil(io.open(dir .. "/builds/manifest.json"), "nothing of the run is written")

    -- a rank outside the launch (variables set by hand): refused at once, not after the rendezvous timeout
    for _, vars in ipairs { "SLURM_PROCID=2 SLURM_NTASKS=2", "SLURM_PROCID=0 SLURM_NTASKS=0" } do
      local t0 = os.time()
      local rcv, _, ev = sh(vars .. " " .. BIN .. " node " .. dir .. "/c.lua --dir " .. dir .. "/badrank")
      assert.are.equal(2, rcv, ev)
      assert.matches("SLURM_PROCID=%-?%d+ and SLURM_NTASKS=%d+ %(srun %(Slurm%)%): a rank from 0 to", ev)
      assert.is_true(os.time() - t0 < 30)
    end

    -- more ranks than nodes: a config error, as `run processes=5` is
    local rc5, _, e5 = sh("SLURM_PROCID=0 SLURM_NTASKS=5 " .. BIN .. " node " .. dir .. "/c.lua --dir "
                          .. dir .. "/five")
    assert.are.equal(2, rc5, e5)
    assert.matches("5 processes for 4 nodes", e5)

    local rc, _, e = sh("DPY_RENDEZVOUS_TIMEOUT=1 SLURM_PROCID=1 SLURM_NTASKS=2 " .. BIN .. " node " .. dir
                        .. "/c.lua --dir " .. dir .. "/alone")
    assert.are.equal(1, rc)
    assert.matches("rendezvous in .*/alone/rendezvous/%d+: rank%(s%) 0 never arrived after 1 s %(is .*/alone one "
                   .. "directory that every process sees%?%)", e)
  end)

  it("marks a run its launcher interrupted (srun passes Ctrl-C on): the manifest and rank 0's summary", function()
    local host = require "dpy.host.core"
    -- 20 rounds: each signal comes within a second of a round the ranks finished (progress files are
    -- written twice a second), 17 or more rounds before the end (a round takes 0.1 s at the least);
    -- the last launch runs the rounds left (60 took 10-20 s more). stop_grace = 5: rank 0 waits that
    -- long for the other ranks' last progress; rank 1 stopped while it connects writes none (the
    -- default 15 s, every time)
    local keys = "rounds=20 checkpoint_every=1 stop_grace=5"
    local pids = {}
    for r = 0, 1 do
      pids[r + 1] = assert(host.spawn({ "/bin/sh", "-c", string.format("SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_JOB_ID=79 "
                                        .. "exec %s node %s/c.lua %s --dir %s/int", r, BIN, dir, keys,
                                        dir) }, string.format("%s/int-%d.out", dir, r)))
    end
    for _ = 1, 600 do   -- until every rank has finished a round
      local a, b = read_file(dir .. "/int/progress-0.json"), read_file(dir .. "/int/progress-1.json")
      if a and b and not a:match('"round":0') and not b:match('"round":0') then break end
      host.sleep(0.1)
    end
    for _, pid in ipairs(pids) do host.kill(pid, 2) end
    assert.are.equal(130, wait_exit(pids[1]), read_file(dir .. "/int-0.out"))
    assert.are.equal(130, wait_exit(pids[2]), read_file(dir .. "/int-1.out"))
    local out = read_file(dir .. "/int-0.out")
    assert.matches("interrupted by SIGINT after round %d+; the results so far are in", out)
    local manifest = require("dpy.metrics").read(dir .. "/int/manifest.json")
    assert.are.equal("SIGINT", manifest.interrupted and manifest.interrupted.signal, out)
    assert.is_true(manifest.interrupted.round >= 1)
    -- resumed, then interrupted before its ranks finish a round: it stopped after the round it
    -- resumed from, not after round 0 (a resumed process's progress said 0 until it ended a round)
    local from = manifest.interrupted.round
    for r = 0, 1 do
      pids[r + 1] = assert(host.spawn({ "/bin/sh", "-c", string.format("SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_JOB_ID=81 "
                                        .. "exec %s node %s/c.lua %s --resume auto --dir %s/int", r, BIN,
                                        dir, keys, dir) }, string.format("%s/int-%d.out", dir, r)))
    end
    for _ = 1, 600 do   -- until rank 0 has recorded the resume
      local m = require("dpy.metrics").read(dir .. "/int/manifest.json")
      if m and m.resumed then break end
      host.sleep(0.05)
    end
    for _, pid in ipairs(pids) do host.kill(pid, 2) end
    wait_exit(pids[1])
    wait_exit(pids[2])
    manifest = require("dpy.metrics").read(dir .. "/int/manifest.json")
    assert(manifest.interrupted, read_file(dir .. "/int-0.out"))
    assert.not_matches("%.lua:%d+:", read_file(dir .. "/int-0.out"))   -- (stopped in the rendezvous too)
    -- (the round it resumed from: the last every node checkpointed, the round interrupted or one before)
    assert.is_true(manifest.resumed[1].round >= from - 1)
    assert.is_true(manifest.interrupted.round >= manifest.resumed[1].round, read_file(dir .. "/int-0.out"))
    -- resumed by another launch, it ends no longer marked interrupted: the resume records it
    local resumed = {}
    for r = 0, 1 do
      resumed[#resumed + 1] = string.format("(SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_JOB_ID=80 %s node %s/c.lua "
                                            .. "%s --resume auto --dir %s/int > %s/res-%d.out 2>&1)", r, BIN, dir,
                                            keys, dir, dir, r)
    end
    local code = sh("(" .. table.concat(resumed, " & ") .. " & wait)")
    assert.are.equal(0, code, read_file(dir .. "/res-0.out"))
    manifest = require("dpy.metrics").read(dir .. "/int/manifest.json")
    assert.is_nil(manifest.interrupted, read_file(dir .. "/res-0.out"))
    assert.are.equal("SIGINT", manifest.resumed and manifest.resumed[1].interrupted.signal)
  end)
end)

describe("rendezvous", function()
  local rendezvous = require "dpy.rendezvous"
  local function env(t) return function(k) return t[k] end end

  it("advertises DPY_HOST, else the machine's name when it resolves, else an interface's address", function()
    assert.are.equal("10.1.2.3", rendezvous.advertise(nil, env { DPY_HOST = "10.1.2.3" }, "x.invalid"))
    assert.are.equal("localhost", rendezvous.advertise(nil, env {}, "localhost"))
    assert.are.equal("127.0.0.1", rendezvous.advertise("127.0.0.1", env {}, "no-such-host.invalid"))
    local ok, err = pcall(rendezvous.advertise, "rank0.invalid", env {}, "no-such-host.invalid")
    assert.is_false(ok)
    assert.are.equal("rendezvous: this machine's name 'no-such-host.invalid' does not resolve, and no interface "
                     .. "reaches rank 0 (rank0.invalid): set DPY_HOST to an address of this machine that the other "
                     .. "ranks reach", err)
  end)

  it("hands a rank every address, its own too, when rank 0's comes in the middle of a pass", function()
    -- rank 1 looked for rank 0's address (not there: it could not write its own yet), then read
    -- every rank's file, rank 0's now there and its own still not, and returned a list with a hole
    -- (CI: "bad argument #-1 to 'start' (string expected, got nil)")
    local dir = tmpdir()
    local rdv = rendezvous.path(dir, 7)
    assert(require("dpy.host.core").mkdir_p(rdv))
    write_file(rdv .. "/0", "127.0.0.1:4000")
    write_file(rdv .. "/ready", "7")
    local open, first = io.open, true
    io.open = function(path, ...)   -- luacheck: ignore 122 (rank 0's file missing at the first look only)
      if path == rdv .. "/0" and first then first = false; return nil, "not yet" end
      return open(path, ...)
    end
    local ok, addresses = pcall(rendezvous.join, { port = 5000 }, dir, 1, 2, 7, nil, 5)
    io.open = open   -- luacheck: ignore 122
    assert.is_true(ok, addresses)
    assert.are.equal(2, #addresses)
    assert.are.equal("127.0.0.1:4000", addresses[1])
    assert.matches("^.+:5001$", addresses[2])
  end)

  it("runs dpy-lua run inside a job of mpirun or Slurm as on its own: its processes are no ranks #e2e", function()
    local dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN .. "processes = 2\n")
    local code, out, err = sh("SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_JOB_ID=9 OMPI_COMM_WORLD_RANK=0 "
                              .. "OMPI_COMM_WORLD_SIZE=1 " .. BIN .. " run " .. dir .. "/c.lua --out " .. dir .. "/run")
    assert.are.equal(0, code, err)
    local _, summaries = out:gsub("results in ", "")
    assert.are.equal(1, summaries, out)
    for uid = 0, 3 do assert.truthy(node_metrics(dir .. "/run", uid), "node " .. uid) end
  end)

  it("runs the ranks of a machine whose own name does not resolve #e2e", function()
    local dir = tmpdir()
    write_file(dir .. "/hostname", "no-such-host.invalid\n")
    if sh("unshare -rm sh -c " .. shell_quote("mount --bind " .. dir .. "/hostname /etc/hostname")) ~= 0 then
      pending("unshare -rm cannot make a private mount namespace here")
      return
    end
    write_file(dir .. "/c.lua", TINY_RUN)
    local procs = {}
    for r = 0, 1 do
      procs[#procs + 1] = string.format("SLURM_PROCID=%d SLURM_NTASKS=2 SLURM_JOB_ID=5 %s node %s/c.lua --dir %s/run",
                                        r, BIN, dir, dir)
    end
    local code, _, err = sh("unshare -rm sh -c " .. shell_quote("mount --bind " .. dir .. "/hostname /etc/hostname "
                            .. "&& (" .. table.concat(procs, " & ") .. " & wait) 2>&1"))
    assert.are.equal(0, code, err)
    for uid = 0, 3 do assert.truthy(node_metrics(dir .. "/run", uid), "node " .. uid) end
    local rdv = dir .. "/run/rendezvous/" .. require("dpy.paths").list(dir .. "/run/rendezvous")[1]
    for r = 0, 1 do
      local a = read_file(rdv .. "/" .. r)
      assert.is_nil(a:find("no-such-host", 1, true), a)
      assert.matches("^%d+%.%d+%.%d+%.%d+:%d+$", a)
    end
  end)
end)

describe("host.sleep", function()
  it("refuses a time it cannot sleep (NaN, past 10^9 s), and takes 0 or less as none", function()
    local host = require "dpy.host.core"
    -- a time past what a timespec holds was cast to a negative one: no sleep at all, silently
    assert.error_matches(function() host.sleep(0 / 0) end, "seconds must be a number in 0 .. 1e9, got %-?nan")
    assert.error_matches(function() host.sleep(1e300) end, "seconds must be a number in 0 .. 1e9, got 1e%+300")
    assert.error_matches(function() host.sleep(1 / 0) end, "got inf")
    local t0 = host.clock()
    host.sleep(-1)
    host.sleep(0)
    host.sleep(0.02)
    assert.is_true(host.clock() - t0 >= 0.02)
  end)
end)

describe("host's pids, descriptors and ports", function()
  it("refuses one past its range instead of cutting it to another (kill(2^32) signalled this process group)", function()
    local host = require "dpy.host.core"
    for _, pid in ipairs { 1 << 32, 0, -1, math.mininteger } do   -- signal 0: nothing sent, were it accepted
      assert.error_matches(function() host.kill(pid, 0) end,
                           "a process id must be 1%.%.2147483647, got " .. (tostring(pid):gsub("%-", "%%-")))
    end
    assert.error_matches(function() host.kill(host.pid(), (1 << 32) + 15) end, "a signal must be 0%.%.")
    assert.error_matches(function() host.wait(-1, true) end, "a process id must be")
    assert.error_matches(function() host.wait((1 << 32) + host.pid(), true) end, "a process id must be")
    assert.error_matches(function() host.close((1 << 32) + 1) end, "a descriptor must be 0%.%.")
    assert.error_matches(function() host.isatty((1 << 32) + 2) end, "a descriptor must be 0%.%.")
    assert.error_matches(function() host.port_free("127.0.0.1", 65536 + 22) end, "a port must be 0%.%.65535, got 65558")
    assert.error_matches(function() host.listen("127.0.0.1", -1) end, "a port must be")
    assert.error_matches(function() host.set_threads((1 << 32) + 1) end, "threads must be 1%.%.")
    host.kill(host.pid(), 0)   -- a signal 0 to itself: accepted, nothing sent
  end)
end)

describe("host.spawn", function()
  local host = require "dpy.host.core"

  it("gives the child its output and error files and its directory, forked or executed alike", function()
    local dir = tmpdir()
    local o, e = "spawn_spec_" .. host.pid() .. ".o", "spawn_spec_" .. host.pid() .. ".e"   -- named from here
    local lua = "io.write(require('dpy.host.core').cwd()) io.stderr:write('E') os.exit(3)"
    for _, argv in ipairs { { DPY_BIN, "-e", lua },                        -- this program: forked
                            { "/bin/sh", "-c", "printf %s \"$PWD\"; printf E >&2; exit 3" } } do
      local pid = assert(host.spawn(argv, o, { err = e, dir = dir }))
      assert.are.equal(3, wait_exit(pid))
      assert.are.equal(dir, read_file(o))
      assert.are.equal("E", read_file(e))
      os.remove(o)
      os.remove(e)
      assert.is_nil(io.open(dir .. "/" .. o))
      -- a directory it cannot enter: no child, the path and the reason, as the system gives it
      local none, err = host.spawn(argv, dir .. "/o", { dir = dir .. "/missing" })
      assert.is_nil(none)
      assert.are.equal(dir .. "/missing: No such file or directory", err)
      -- an output file it cannot create, before the directory and the program
      none, err = host.spawn(argv, dir .. "/none/o", { dir = dir .. "/missing" })
      assert.is_nil(none)
      assert.are.equal(dir .. "/none/o: No such file or directory", err)
    end
    -- a program that is not there, or cannot be run
    write_file(dir .. "/plain", "not a program\n")
    for _, program in ipairs { dir .. "/no-such-program", dir .. "/plain" } do
      local none, err = host.spawn({ program, "-x" }, dir .. "/o")
      assert.is_nil(none)
      assert.matches("^" .. program:gsub("%p", "%%%0") .. ": %u", err)
    end
    assert.are.same({ nil, "fd 999: Bad file descriptor" }, { host.spawn({ "/bin/true" }, dir .. "/o", { fd = 999 }) })
    assert.has_error(function() host.spawn({ "/bin/true" }, dir .. "/o", { fd = "x" }) end,
                     "bad argument #3 to 'spawn' (fd must be an integer)")
    assert.has_error(function() host.spawn({ "/bin/true" }, dir .. "/o", { stderr = "x" }) end,
                     "bad argument #3 to 'spawn' (unknown option 'stderr' (fd, err, dir, input))")
  end)

  it("gives the child its input file, forked or executed alike", function()
    local dir = tmpdir()
    write_file(dir .. "/in", "line one\n")
    for _, argv in ipairs { { DPY_BIN, "-e", "io.write(io.read('l'), '|')" },   -- this program: forked
                            { "/bin/sh", "-c", "read l; printf '%s|' \"$l\"" } } do
      local pid = assert(host.spawn(argv, dir .. "/o", { input = dir .. "/in" }))
      assert.are.equal(0, wait_exit(pid))
      assert.are.equal("line one|", read_file(dir .. "/o"))
      local none, err = host.spawn(argv, dir .. "/o", { input = dir .. "/missing" })
      assert.is_nil(none)
      assert.are.equal(dir .. "/missing: No such file or directory", err)
    end
  end)

  it("gives the children of an executed child their whole command line as their title", function()
    -- a.lua starts libgomp's threads, so its child b.lua is executed (DPY_SPAWN_PARENT in its
    -- environment, spawn.c); b.lua forks c, whose title must hold every word
    local dir = tmpdir()
    write_file(dir .. "/a.lua", string.format([[
      local host, tensor = require "dpy.host.core", require "dpy.tensor"
      host.set_threads(2)
      local x = tensor.rand(256, 256)
      for _ = 1, 20 do x = (x:matmul(x)):clamp(0, 1) end
      assert(tonumber(io.open("/proc/self/status"):read("a"):match("Threads:%%s*(%%d+)")) > 1)
      local pid = host.spawn({ %q, %q }, %q)
      os.exit(host.wait(pid))]], DPY_BIN, dir .. "/b.lua", dir .. "/b.out"))
    local sleep = "require('dpy.host.core').sleep(30)"
    write_file(dir .. "/b.lua", string.format([[
      local host = require "dpy.host.core"
      local argv = { %q, "-e", %q }
      for _ = 1, 40 do argv[#argv + 1] = "word" end
      local pid = assert(host.spawn(argv, %q))
      local title, deadline = "", host.clock() + 10
      repeat   -- until the child has set it
        host.sleep(0.05)
        title = io.open("/proc/" .. pid .. "/cmdline"):read("a"):gsub("%%z", " ")
      until title:find("word") or host.clock() > deadline
      io.write(title)
      host.kill(pid, 9)
      host.wait(pid)]], DPY_BIN, sleep, dir .. "/c.out"))
    local code, _, err = sh(shell_quote(DPY_BIN) .. " " .. dir .. "/a.lua")
    assert.are.equal(0, code, err)
    assert.are.equal(DPY_BIN .. " -e " .. sleep .. string.rep(" word", 40) .. " ", read_file(dir .. "/b.out"))
  end)

  it("forks this program, libraries loaded: a child's CPU time before its first line is a fraction", function()
    -- os.clock() is the child's CPU time: an executed dpy-lua spends 0.6-0.9 s loading libtorch
    local dir = tmpdir()
    local function child_cpu(argv)
      local pid = assert(host.spawn(argv, dir .. "/o"))
      assert.are.equal(0, wait_exit(pid))
      return tonumber(read_file(dir .. "/o"))
    end
    local lua = "io.write(os.clock())"
    local forked = child_cpu { DPY_BIN, "-e", lua }
    local executed = child_cpu { "/bin/sh", "-c", "exec " .. shell_quote(DPY_BIN) .. " -e " .. shell_quote(lua) }
    assert.is_true(forked < 0.25 * executed, string.format("forked %.3f s, executed %.3f s", forked, executed))
  end)

  -- the specs' sh (tests/helpers/preload.lua): "timeout N dpy-lua ..." went through the shell, an
  -- executed dpy-lua each (0.6-0.9 s of CPU loading libtorch; 4 s a command on a loaded machine)
  it("is how the specs' sh runs timeout N dpy-lua ...: forked, with timeout's limit, signal and exit codes", function()
    local B = shell_quote(DPY_BIN)
    local parent = [[-e 'io.write(io.open("/proc/self/stat"):read("l"):match("^%d+ %b() %S+ (%d+)"), " ",
                                  require("dpy.host.core").cwd())']]
    local code, out = sh("cd /tmp && timeout 60 " .. B .. " " .. parent:gsub("\n%s*", ""))
    assert.are.equal(0, code)
    assert.are.equal(host.pid() .. " /tmp", out)   -- a child of this process: forked, in its directory
    local sleep = " -e 'require(\"dpy.host.core\").sleep(60)'"
    for _, case in ipairs { { "timeout 1", 124 }, { "timeout -s KILL 1", 137 } } do
      local t0 = host.clock()
      assert.are.equal(case[2], (sh(case[1] .. " " .. B .. sleep)), case[1])
      assert.is_true(host.clock() - t0 < 20, case[1] .. ": " .. host.clock() - t0 .. " s")
    end
    code, out = sh("timeout 5 echo x")   -- another program: timeout(1) itself
    assert.are.same({ 0, "x\n" }, { code, out })
  end)
end)
