-- The dpy-lua command as a process: the interpreter, run, exit codes, and the REPL through a pipe.
local metrics = require "dpy.metrics"

local BIN = shell_quote(DPY_BIN)

-- A small, fast experiment: 30 steps on 2000 Fashion-MNIST samples, evaluated on 500.
local TINY = "seed = 3\nbatch_size = 16\nmax_steps = 30\neval_every = 15\n"
          .. "train_samples = 2000\ntest_samples = 500\n"

-- The pattern of a config check's refusal of a key set on the command line: named there (KEY=VALUE),
-- then the key's own words (rest)
local function at(key, rest) return "^dpy%-lua: command line: " .. key .. "=[^\n]-: " .. key .. rest end

describe("dpy-lua as an interpreter", function()
  it("runs a script with lua's arg table and the dpy modules", function()
    local dir = tmpdir()
    write_file(dir .. "/s.lua", "print(arg[0], arg[1], arg[2], #arg, select('#', ...))\n"
                                .. "print(require('dpy.tensor').ones(2):sum():item())")
    local code, out = sh(BIN .. " " .. dir .. "/s.lua a b")
    assert.are.equal(0, code)
    assert.are.equal(dir .. "/s.lua\ta\tb\t2\t2\n2.0\n", out)
  end)

  it("handles -e, -l and stdin, and exits 1 with a traceback on an error", function()
    local code, out = sh(BIN .. " -l dpy -e 'print(dpy.version)'")
    assert.are.equal(0, code)
    assert.matches("^0%.1%.0", out)
    code, out = sh("echo 'print(6 * 7)' | " .. BIN .. " -")
    assert.are.equal(0, code)
    assert.are.equal("42\n", out)
    local err
    code, out, err = sh(BIN .. " -e 'local t = require(\"dpy.tensor\"); return t.ones(2) + t.ones(3)'")
    assert.are.equal(1, code)
    assert.are.equal("", out)
    assert.matches("torch: The size of tensor a %(2%)", err)
    assert.matches("stack traceback", err)
  end)

  it("prints versions and help; a usage error exits 2", function()
    local code, out = sh(BIN .. " --version")
    assert.are.equal(0, code)
    assert.matches("dpy%-lua 0%.1%.0\nbuild %x+\nLua 5%.4", out)
    assert.matches("libtorch 1%.", out)
    assert.matches("devices: cpu", out)
    code, out = sh(BIN .. " --help")
    assert.are.equal(0, code)
    assert.matches("run CONFIG.lua", out)
    code = sh(BIN .. " --bogus")
    assert.are.equal(2, code)
    code = sh(BIN .. " run")
    assert.are.equal(2, code)
  end)

  it("gives each command's help, lists the environment, and suggests the command meant", function()
    for _, cmd in ipairs { "run", "node", "repl", "dispatch", "report" } do
      local code, out = sh(BIN .. " help " .. cmd)
      assert.are.equal(0, code, cmd)
      assert.matches("^Usage: dpy%-lua " .. cmd, out)
    end
    local code, out = sh(BIN .. " help")
    assert.are.equal(0, code)
    for _, var in ipairs { "DPY_LUA_PATH", "DPY_THREADS", "DPY_CACHE_DIR", "DPY_HOST", "DPY_RENDEZVOUS_TIMEOUT",
                           "DPY_PROGRESS_SECONDS" } do
      assert.matches(var, out, 1, true)
    end
    local _, err
    code, _, err = sh("cd /tmp && " .. BIN .. " runn x.lua")
    assert.are.equal(2, code)
    assert.matches("did you mean 'run'%?", err)
    code, _, err = sh(BIN .. " help nope")
    assert.are.equal(2, code)
    assert.matches("no command 'nope'", err)
  end)

  -- Libraries loaded with the executable give every thread a copy of their TLS at its start: Debian's
  -- libtorch's came to 116,224 bytes a thread, which each of thousands of node threads touched (launch.c)
  it("gives its threads no static TLS of libtorch's libraries", function()
    local code, out, err = sh(BIN .. " -e 'print(require(\"dpy.host.core\").memory().static_tls, "
                              .. "io.open(\"/proc/self/maps\"):read(\"a\"):find(\"libtsan\") ~= nil)'")
    assert.are.equal(0, code, err)
    local bytes, tsan = out:match("^(%d+)\t(%a+)\n$")
    bytes = assert(tonumber(bytes), out)
    if tsan == "false" then   -- ThreadSanitizer's runtime alone brings 786 KB of it
      assert.is_true(bytes > 0 and bytes < 16 * 1024, bytes .. " bytes a thread")
    end
  end)

  it("installs with its Lua modules, and a binary away from lua/ uses its source tree's", function()
    local prefix = tmpdir()
    local build = DPY_BIN:match("^(.*)/[^/]+$")
    local code, _, err = sh("cmake --install " .. shell_quote(build) .. " --prefix " .. prefix)
    assert.are.equal(0, code, err)
    local out
    code, out, err = sh("cd / && env -u DPY_LUA_PATH " .. prefix .. "/bin/dpy-lua -e "
                        .. "'print(require(\"dpy.config\").SCHEMA.nodes ~= nil, package.path)'")
    assert.are.equal(0, code, err)
    assert.matches("^true\t" .. prefix:gsub("%p", "%%%0") .. "/share/dpy%-lua/lua/%?%.lua", out)
    local function build_of(bin)
      return select(2, sh("cd / && env -u DPY_LUA_PATH " .. bin .. " --version")):match("\nbuild (%x+)\n")
    end
    assert.are.equal(build_of(BIN), build_of(prefix .. "/bin/dpy-lua"), "an install is the same build")
    local function program_of(bin)   -- the libdpy-lua.so it loaded
      local c, o, e = sh("cd / && " .. bin .. " -e "
                         .. "'print(io.open(\"/proc/self/maps\"):read(\"a\"):match(\"(/%S*libdpy%-lua%.so)\\n\"))'")
      assert.are.equal(0, c, e)
      return o
    end
    local function real(path) return select(2, sh("readlink -f " .. shell_quote(path))) end   -- as maps has it
    assert.are.equal(real(prefix .. "/lib/dpy-lua/libdpy-lua.so"), program_of(prefix .. "/bin/dpy-lua"))
    local lonely = tmpdir()
    sh("mkdir -p " .. lonely .. "/bin && cp " .. shell_quote(DPY_BIN) .. " " .. lonely .. "/bin/")
    code, out, err = sh("cd / && env -u DPY_LUA_PATH " .. lonely .. "/bin/dpy-lua -e 'print(package.path)'")
    assert.are.equal(0, code, err)
    assert.matches("^" .. REPO:gsub("%p", "%%%0") .. "/lua/%?%.lua", out)
    assert.are.equal(real(build .. "/libdpy-lua.so"), program_of(lonely .. "/bin/dpy-lua"), "its build's program")
  end)

  -- Two builds that both call themselves 0.1.0 can give other numbers: the build names the sources
  it("names its build: the same for a copy of its Lua tree, another when a module differs", function()
    local function build(env)
      local code, out, err = sh((env or "") .. " " .. BIN .. " --version")
      assert.are.equal(0, code, err)
      return out:match("^dpy%-lua 0%.1%.0\nbuild (%x+)\n")
    end
    local mine = build()
    assert.matches("^" .. ("%x"):rep(16) .. "$", mine)
    local tree = tmpdir()
    assert.are.equal(0, (sh("cp -r " .. shell_quote(REPO .. "/lua") .. " " .. tree .. "/same && cp -r "
                            .. shell_quote(REPO .. "/lua") .. " " .. tree .. "/other")))
    write_file(tree .. "/same/dpy/notes.txt", "not a module: not part of the build\n")
    local f = assert(io.open(tree .. "/other/dpy/random.lua", "a"))
    f:write("-- one more line\n")
    f:close()
    assert.are.equal(mine, build("DPY_LUA_PATH=" .. tree .. "/same"))
    local other = build("DPY_LUA_PATH=" .. tree .. "/other")
    assert.matches("^" .. ("%x"):rep(16) .. "$", other)
    assert.are_not.equal(mine, other)
    local code, out = sh(BIN .. " -e 'print(require(\"dpy.host.core\").build())'")
    assert.are.equal(0, code)
    assert.are.equal(mine .. "\n", out)
  end)

  it("says so when its Lua tree's dpy.cli is no module, instead of aborting", function()
    local tree = tmpdir()
    assert.are.equal(0, (sh("cp -r " .. shell_quote(REPO .. "/lua") .. " " .. tree .. "/lua")))
    write_file(tree .. "/lua/dpy/cli.lua", "return true\n")   -- a tree broken midway through an edit
    for _, args in ipairs { "run x.lua", "report x", "node x.lua --process 0 --dir x" } do
      local code, _, err = sh("DPY_LUA_PATH=" .. tree .. "/lua " .. BIN .. " " .. args)
      assert.are.equal(1, code, err)
      assert.matches("dpy%-lua: dpy%.cli %(.*/lua/dpy/cli%.lua%) gave no module table", err)
      assert.not_matches("PANIC", err)
    end
  end)

  -- each fell back to its default without a word (a client of a slow link was cut off at 30 s,
  -- DPY_THREADS=abc ran on every core, a rendezvous timeout of -1 gave up at once)
  it("refuses a numeric DPY_* variable that is not such a number, naming it, its bounds and default", function()
    local cases = {
      DPY_ATTACH_FRAME_SECONDS = { bad = { "abc", "-1", "0", "1e999", "nan", "5s", "1e10" }, good = { "2.5", "" },
                                   what = "a number of seconds > 0 and <= 1e9 (unset: 30)" },
      DPY_RENDEZVOUS_TIMEOUT = { bad = { "-1", "0", "2 min" }, good = { "0.5" },
                                 what = "a number of seconds > 0 and <= 1e9 (unset: 120)" },
      DPY_PROGRESS_SECONDS = { bad = { "-1", "ten" }, good = { "0", "30" },
                               what = "a number of seconds >= 0 and <= 1e9 (unset: 10)" },
      DPY_THREADS = { bad = { "abc", "0", "2.5", "1e9", "-2" }, good = { "1" },
                      what = "a whole number from 1 to 4096 (unset: one per core)" },
      DPY_FORK = { bad = { "no", "2" }, good = { "0", "1" }, what = "0 or 1 (unset: 1)" },
    }
    for name, c in pairs(cases) do
      for _, value in ipairs(c.bad) do
        local code, out, err = sh(name .. "=" .. shell_quote(value) .. " " .. BIN .. " -e 'print(1)'")
        assert.are.equal(2, code, name .. "=" .. value)
        assert.are.equal("", out, value)
        assert.are.equal("dpy-lua: " .. name .. "=" .. value .. ": not " .. c.what .. "\n", err)
      end
      for _, value in ipairs(c.good) do   -- empty: unset
        local code, out, err = sh(name .. "=" .. shell_quote(value) .. " " .. BIN .. " -e 'print(1)'")
        assert.are.equal(0, code, name .. "=" .. value .. ": " .. err)
        assert.are.equal("1\n", out)
      end
    end
  end)

  -- libtorch's pools wait for each thread they start: under a lower limit on threads the process hung
  it("refuses DPY_THREADS that a limit on threads cannot hold, naming the limit, instead of hanging", function()
    -- RLIMIT_NPROC counts a user's tasks, and binds no root: a user of no other process (nobody)
    if sh("test $(id -u) = 0 && command -v setpriv && command -v prlimit && ! pgrep -u 65534 >/dev/null") ~= 0 then
      pending("needs root, setpriv and prlimit, and no process of uid 65534") return
    end
    local function limited(threads, nproc)
      return sh(string.format("cd / && DPY_THREADS=%d timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups "
                              .. "prlimit --nproc=%d %s -e 'local a = require(\"dpy.tensor\").randn{256, 256} "
                              .. "print(a:matmul(a):size(0))'", threads, nproc, BIN))
    end
    local code, out, err = limited(4, 3)
    assert.are.equal(1, code, err)
    assert.are.equal("", out)
    assert.matches("^dpy%-lua: libtorch's 4 threads %(DPY_THREADS, or the config's threads; else one per core%) need 6 "
                   .. "more threads, and 2 could start %(Resource temporarily unavailable%): a limit on threads is "
                   .. "lower %(ulimit %-u, or the cgroup's pids%.max%); set DPY_THREADS %(or threads%) to 2 or "
                   .. "fewer\n$", err)
    code, out, err = limited(2, 3)   -- itself and the pools' 2
    assert.are.equal(0, code, err)
    assert.are.equal("256\n", out)
  end)

  it("says a config run as a script is a config, instead of ending silently", function()
    local dir = tmpdir()
    write_file(dir .. "/c.lua", "nodes = 4\nrounds = 2\n")
    local code, _, err = sh(BIN .. " " .. dir .. "/c.lua")
    assert.are.equal(2, code)
    assert.matches("looks like an experiment config %(it sets nodes, rounds%); did you mean `dpy%-lua run ", err)
    write_file(dir .. "/s.lua", "nodes = 4\nprint(nodes * 2)\n")   -- a script: it calls, not only assigns
    local out
    code, out = sh(BIN .. " " .. dir .. "/s.lua")
    assert.are.equal(0, code)
    assert.are.equal("8\n", out)
    -- a config built on another by include (configs/1_private.lua), which a script does not have
    write_file(dir .. "/i.lua", "include 'c.lua'\nnodes = 8\n")
    code, _, err = sh(BIN .. " " .. dir .. "/i.lua")
    assert.are.equal(2, code, err)
    assert.are.equal("dpy-lua: " .. dir .. "/i.lua looks like an experiment config (it calls include); did you mean "
                     .. "`dpy-lua run " .. dir .. "/i.lua`?\n", err)
    local deep = dir .. "/" .. string.rep("sub", 30)   -- a path Lua shortens in its messages
    assert(require("dpy.host.core").mkdir_p(deep))
    write_file(deep .. "/i.lua", "include 'c.lua'\n")
    code, _, err = sh(BIN .. " " .. deep .. "/i.lua")
    assert.are.equal(2, code, err)
    assert.matches("it calls include", err, 1, true)
    code, _, err = sh(BIN .. " -e 'include(1)'")   -- not a file: the error as it is
    assert.are.equal(1, code)
    assert.matches("attempt to call a nil value %(global 'include'%)", err)
  end)
end)

describe("dpy-lua run", function()
  it("takes a negative --seed, as --seed -1 and as --seed=-1", function()
    local dir = tmpdir()
    write_file(dir .. "/two.lua", "nodes = 2\ngraph = 'full'\nrounds = 1\nlocal_steps = 1\ntrain_samples = 200\n"
                                  .. "test_samples = 50\n")
    for i, seed in ipairs { "--seed -1", "--seed=-1" } do
      local out = dir .. "/" .. i
      local code, _, err = sh(BIN .. " run " .. dir .. "/two.lua -q --out " .. out .. " " .. seed)
      assert.are.equal(0, code, seed .. ": " .. err)
      assert.matches('"seed":%-1', read_file(out .. "/manifest.json"))
    end
  end)

  it("records a seed of 15 or 16 digits as it is in config.json and manifest.json", function()
    -- lua-cjson writes 14 significant digits: 123456789012345 came out as 1.2345678901234e+14,
    -- a seed the run never had, in the files a researcher reads (and in report's labels)
    local dir = tmpdir()
    write_file(dir .. "/two.lua", "nodes = 2\ngraph = 'full'\nrounds = 1\nlocal_steps = 1\ntrain_samples = 200\n"
                                  .. "test_samples = 50\n")
    for i, seed in ipairs { "123456789012345", "-9007199254740991" } do
      local out = dir .. "/" .. i
      local code, _, err = sh(BIN .. " run " .. dir .. "/two.lua -q --out " .. out .. " --seed " .. seed)
      assert.are.equal(0, code, seed .. ": " .. err)
      for _, file in ipairs { "manifest.json", "config.json" } do
        assert.matches('"seed":' .. seed:gsub("%-", "%%-") .. "[,}]", read_file(out .. "/" .. file), nil, file)
      end
      require("dpy.launcher").mark_interrupted(out, { signal = "SIGINT", round = 1 })   -- read and rewritten
      assert.matches('"seed":' .. seed:gsub("%-", "%%-") .. "[,}]", read_file(out .. "/manifest.json"))
    end
  end)

  it("refuses a seed past 2^53, which JSON readers (its own manifest's too) cannot hold", function()
    -- such a seed came back as another from manifest.json: in jq, in JavaScript, in the run's own
    -- rewrite of its manifest at an interrupt or a resume (cjson reads a double)
    local dir = tmpdir()
    write_file(dir .. "/two.lua", "nodes = 2\ngraph = 'full'\nrounds = 1\nlocal_steps = 1\ntrain_samples = 200\n"
                                  .. "test_samples = 50\n")
    write_file(dir .. "/big.lua", "include 'two.lua'\nseed = 4611686018427387904\n")
    for _, c in ipairs { { "two.lua --seed 1733443200123456789", "1733443200123456789" },
                         { "two.lua --seed=-9007199254740992", "-9007199254740992" },
                         { "big.lua", "big.lua:2" } } do
      local code, _, err = sh(BIN .. " run " .. dir .. "/" .. c[1] .. " -q --out " .. dir .. "/out")
      assert.are.equal(2, code, err)
      assert.matches(c[2], err, 1, true)
      assert.matches("9007199254740991", err, 1, true)
      assert.is_nil(io.open(dir .. "/out/manifest.json"))
    end
    local code, _, err = sh(BIN .. " run " .. dir .. "/two.lua -q --out " .. dir .. "/ok --seed 9007199254740991")
    assert.are.equal(0, code, err)
    assert.matches('"seed":9007199254740991[,}]', read_file(dir .. "/ok/manifest.json"))
  end)

  it("trains and writes the run directory, the same numbers for the same seed", function()
    local dir = tmpdir()
    write_file(dir .. "/tiny.lua", TINY)
    local runs = {}
    for i, out in ipairs { dir .. "/a", dir .. "/b" } do
      local code, stdout, stderr = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. out .. " --seed 5")
      assert.are.equal(0, code, stderr)
      assert.matches("final test accuracy", stdout)
      runs[i] = assert(metrics.read(out .. "/0.metrics.json"))
      assert.truthy(read_file(out .. "/config.lua"))
      assert.matches('"seed":5', read_file(out .. "/manifest.json"))
      assert.matches("round 2 step 30", read_file(out .. "/0.log"))
    end
    local m = runs[1].metrics
    assert.are.equal(0, runs[1].uid)
    assert.are.equal(2, #m.test_accuracy)
    assert.are.equal(2, m.test_accuracy[2][1])
    local acc = m.test_accuracy[2][2]
    assert.is_true(acc > 0.3 and acc <= 1, "accuracy " .. acc)
    assert.are.same(runs[1].metrics.train_loss, runs[2].metrics.train_loss)
    assert.are.same(runs[1].metrics.test_accuracy, runs[2].metrics.test_accuracy)
  end)

  it("says how far an interrupted run's furthest node got, beside the round every node finished", function()
    local cli = require "dpy.cli"
    local cfg = { nodes = 4, algorithm = "dpsgd", processes = 2 }
    local s = { rounds = 24, from = 0, seconds = 3, seconds_per_round = 0.125, evaluated = 0, mb_per_node = 1,
                honest = { count = 4, nodes = 4, left_out = {} },
                interrupted = { signal = "SIGINT", number = 2, round = 23 } }
    local function line() return cli.decentralized_text(cfg, "d", s):match("\n  ([^\n]*)") end
    assert.are.equal("4 nodes (dpsgd, 2 processes), 24 rounds on the furthest node, 23 on every node, in 3.0 s: "
                     .. "0.125 s per round", line())
    s.from = 2   -- resumed from round 2
    assert.are.equal("4 nodes (dpsgd, 2 processes), rounds 3-24 on the furthest node, to 23 on every node, in "
                     .. "3.0 s: 0.125 s per round", line())
    s.interrupted.round = 24   -- every node as far
    assert.are.equal("4 nodes (dpsgd, 2 processes), rounds 3-24 in 3.0 s: 0.125 s per round", line())
    s.from, s.rounds, s.interrupted = 23, 24, nil   -- one round ran
    assert.are.equal("4 nodes (dpsgd, 2 processes), round 24 in 3.0 s: 0.125 s per round", line())
    s.interrupted = { signal = "SIGINT", number = 2, round = 24 }
    s.interrupted.round, s.rounds, s.from = 2, 2, 2   -- before any node finished a round of its own
    assert.are.equal("4 nodes (dpsgd, 2 processes), no round after round 2 in 3.0 s", line())
  end)

  -- an interrupted run's nodes last evaluated in different rounds: their mean read as one round's
  it("says when the final accuracies come from different rounds", function()
    local cli, launcher = require "dpy.cli", require "dpy.launcher"
    local dir = tmpdir()
    local cfg = { nodes = 2, algorithm = "dpsgd", processes = 1 }
    write_file(dir .. "/manifest.json", "{}")
    local function node(uid, last)
      local m = { test_accuracy = { { 46, 0.5 }, { last, 0.6 + uid / 10 } }, wall_seconds = {}, bytes_sent = {} }
      write_file(string.format("%s/%d.metrics.json", dir, uid), metrics.json.encode { uid = uid, metrics = m })
    end
    local function text()
      local summary = launcher.summarize(cfg, dir, 1)
      summary.seconds, summary.from = 1, 0
      return cli.decentralized_text(cfg, dir, summary)
    end
    node(0, 48)
    node(1, 50)
    assert.matches("final test accuracy over 2 evaluated honest nodes: mean 0%.6500, min 0%.6000, max 0%.7000 "
                   .. "%(their last evaluations: rounds 48%-50%)", text())
    node(0, 50)
    assert.matches("max 0%.7000\n", text())
  end)

  it("says how a failed process ended: its exit status, the signal that killed it, its last line", function()
    local launcher = require "dpy.launcher"
    assert.are.equal("process 1 exited with 1", launcher.exit_text("process 1", 1))
    assert.are.equal("process 1 exited with 137 (killed by signal 9, SIGKILL)", launcher.exit_text("process 1", 137))
    assert.are.equal("process 1 exited with 143 (killed by signal 15, SIGTERM)", launcher.exit_text("process 1", 143))
    assert.are.equal("process 1 exited with 160 (killed by signal 32)", launcher.exit_text("process 1", 160))
    local list = {}
    launcher.output_failures(list, "", "process 1 exited with 137 (killed by signal 9, SIGKILL)")
    launcher.output_failures(list, "starting\nboom\n", "process 2 exited with 1")
    launcher.output_failures(list, "starting\n\n", "process 3 exited with 1")
    assert.are.same({ { uid = -1, err = "process 1 exited with 137 (killed by signal 9, SIGKILL)" },
                      { uid = -1, err = "process 2 exited with 1: boom" },
                      { uid = -1, err = "process 3 exited with 1: starting" } }, list)
  end)

  it("names each failure once: a node's own files as <uid>, the nodes a failure stopped in one line", function()
    local cli = require "dpy.cli"
    local ABORT = '; stopping (on_peer_failure = "abort")'
    local full = "cannot write metrics: cannot write /r/%d.metrics.json.tmp.7: No space left on device"
    local failed = { { uid = 10, err = full:format(10) }, { uid = 0, err = full:format(0) },
                     { uid = 1, err = full:format(1) .. "\nstack traceback:\n\t[C]: in ?" },
                     { uid = 4, err = "boom" },
                     { uid = 3, err = "round 2: peer 4 failed: boom" .. ABORT },
                     { uid = 5, err = "round 3: peer 3 stopped after peer 4 failed: boom" .. ABORT },
                     { uid = 9, err = "round 2: peer 10 failed: " .. full:format(10) .. ABORT },
                     { uid = 8, err = "round 2: peer 7 sent nothing for 60 s" .. ABORT },
                     { uid = -1, err = "process 1 exited with 137: killed" } }
    assert.are.equal(table.concat({
      "dpy-lua: nodes 0-1, 10 failed: cannot write metrics: cannot write /r/<uid>.metrics.json.tmp.<pid>: No space "
        .. "left on device",
      "dpy-lua: node 4 failed: boom",
      "dpy-lua: node 8 failed: round 2: peer 7 sent nothing for 60 s" .. ABORT,
      "dpy-lua: process 1 exited with 137: killed",
      -- then the nodes that others' failures stopped
      'dpy-lua: nodes 3, 5 stopped when node 4 failed (on_peer_failure = "abort"; their logs say when)',
      'dpy-lua: node 9 stopped when node 10 failed (on_peer_failure = "abort"; its log says when)',
      "" }, "\n"), cli.failure_text(failed))
    -- a node stopped by a node whose own failure is not among them (its process died): the cause
    assert.are.equal('dpy-lua: node 3 stopped when node 4 failed: boom (on_peer_failure = "abort"; its log says '
                     .. "when)\n", cli.failure_text { { uid = 3, err = "round 2: peer 4 failed: boom" .. ABORT } })
  end)

  it("puts the nodes that a dead process stopped on one line with it, not a line each", function()
    -- 512 nodes in 2 processes, process 0 OOM-killed: 235 lines, one per node of process 1, each
    -- naming another unreachable node ("node 18's process 0 is unreachable", "peer 187 is gone")
    local ABORT = '; stopping (on_peer_failure = "abort")'
    local failed = { { uid = -1, err = "process 0 exited with 137 (killed by signal 9, SIGKILL)" },
                     { uid = 4, err = "round 1: node 1's process 0 is unreachable: its connection is closed" .. ABORT },
                     { uid = 5, err = "round 1: node 2's process 0 is unreachable: its connection is closed (and 1 "
                                      .. "more of 2 receivers)" .. ABORT },
                     { uid = 6, err = "round 1: peer 3 is gone" .. ABORT },
                     { uid = 7, err = "round 2: peer 4 failed: round 1: node 1's process 0 is unreachable: its "
                                      .. "connection is closed" .. ABORT .. ABORT },
                     { uid = 8, err = "boom" } }
    assert.are.equal(table.concat({
      "dpy-lua: process 0 exited with 137 (killed by signal 9, SIGKILL)",
      "dpy-lua: node 8 failed: boom",
      'dpy-lua: nodes 4-7 stopped when process 0 ended (on_peer_failure = "abort"; their logs say when)',
      "" }, "\n"), require("dpy.cli").failure_text(failed))
    -- dispatch names the remote: "process 0 on <remote> exited …", or "… lost its connection"
    for _, dead in ipairs { "process 0 on gpu1 exited with 137 (killed by signal 9, SIGKILL)",
                            "process 0 on gpu1 lost its connection" } do
      failed[1].err = dead
      assert.matches("\ndpy%-lua: nodes 4%-7 stopped when process 0 ended", require("dpy.cli").failure_text(failed))
    end
  end)

  it("names a node's own checkpoint directory as <uid>, not a round equal to its uid", function()
    -- a full disk met at a checkpoint: ckpt/<uid>/<round>.ckpt. It made a line per node, and node 1's
    -- read ckpt/1/<uid>.ckpt (its round 1 taken for its uid)
    -- (nodes 0-1 in process 7, 2-3 in process 8: the temporary file names the process)
    local full = "cannot write checkpoint: cannot write /r/ckpt/%d/1.ckpt.tmp.%d: No space left on device"
    local failed = {}
    for uid = 0, 3 do failed[#failed + 1] = { uid = uid, err = full:format(uid, 7 + uid // 2) } end
    assert.are.equal("dpy-lua: nodes 0-3 failed: cannot write checkpoint: cannot write /r/ckpt/<uid>/1.ckpt.tmp.<pid>: "
                     .. "No space left on device\n", require("dpy.cli").failure_text(failed))
    assert.are.equal("dpy-lua: node 1 failed: " .. full:format(1, 7) .. "\n",   -- a node alone: its own path
                     require("dpy.cli").failure_text { failed[2] })
  end)

  it("reports a config error with file and line, and exits 2 (run, node, dispatch, repl alike) #checks", function()
    local dir = tmpdir()
    write_file(dir .. "/bad.lua", "seed = 1\nbatch_sise = 3\n")
    local want = dir .. "/bad.lua:2: unknown config key 'batch_sise' %(did you mean 'batch_size'%?%)"
    for _, command in ipairs {
      " run " .. dir .. "/bad.lua --out " .. dir .. "/out",
      " node " .. dir .. "/bad.lua --process 0 --dir " .. dir .. "/out",
      " dispatch " .. dir .. "/bad.lua --remotes " .. dir .. "/none.lua --out " .. dir .. "/out",
      " repl " .. dir .. "/bad.lua --uid 0 < /dev/null",
    } do
      local code, _, err = sh(BIN .. command)
      assert.are.equal(2, code, command .. ": " .. err)
      assert.matches(want, err)
    end
    assert.is_nil(read_file(dir .. "/out/manifest.json"))
    -- a bad override, a bad value, a graph that cannot be built: config errors too
    write_file(dir .. "/ok.lua", "nodes = 4\nrounds = 1\n")
    for _, args in ipairs { "port=70000", "'faults={dorp=0.5}'", "'graph={\"regular\",degree=7}'",
                            "port=65535 processes=2" } do
      local code, _, err = sh(BIN .. " run " .. dir .. "/ok.lua --out " .. dir .. "/out " .. args)
      assert.are.equal(2, code, args .. ": " .. err)
      if args:match("^port=65535") then assert.matches("need ports up to 65536, past 65535", err) end
    end
    assert.is_nil(read_file(dir .. "/out/manifest.json"))
  end)

  it("node names a --uid or --process past the config's, and a --dir that holds no prepared run #checks", function()
    local dir = tmpdir()
    write_file(dir .. "/four.lua", "nodes = 4\nrounds = 1\n")
    local code, _, err = sh(BIN .. " node " .. dir .. "/four.lua --uid 9 --dir " .. dir)
    assert.are.equal(2, code, err)
    assert.are.equal("dpy-lua node: --uid 9: the config has 4 nodes\n", err)
    code, _, err = sh(BIN .. " node " .. dir .. "/four.lua processes=2 --process 2 --dir " .. dir)
    assert.are.equal(2, code, err)
    assert.are.equal("dpy-lua node: --process 2: the config has 2 processes\n", err)
    code, _, err = sh(BIN .. " node " .. dir .. "/four.lua processes=4 --process 3 --dir " .. dir .. "/none")
    assert.are.equal(2, code, err)
    assert.are.equal("dpy-lua node: --dir " .. dir .. "/none holds no prepared run (no partition.pt): dpy-lua node "
                     .. "hosts a process of a run that its launcher (dpy-lua run, dispatch) prepared there\n", err)
  end)

  it("warns of a setting another key overrides, naming both and the one that wins, -q or not #checks", function()
    local dir = tmpdir()
    write_file(dir .. "/c.lua", "nodes = 8\nrounds = 1\nlocal_steps = 5\n")
    -- then refused (processes past nodes): the warning comes first, the run's check still decides
    local code, _, err = sh(BIN .. " run " .. dir .. "/c.lua -q local_epochs=1 processes=100 --out " .. dir .. "/o")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: warning: local_steps = 5 %([^)]*c%.lua:3%) is ignored: local_epochs = 1 %(command "
                   .. "line: local_epochs=1%) wins [^\n]*\ndpy%-lua: command line: processes=100: processes: 100 "
                   .. "processes for 8 nodes", err)
  end)

  it("refuses what the config alone makes wrong before writing anything: exit 2, no directory #checks", function()
    local dir = tmpdir()
    write_file(dir .. "/eight.lua", "nodes = 8\nrounds = 1\nlocal_steps = 1\ntrain_samples = 600\n"
                                    .. "test_samples = 100\n")
    local function absent(path) return (sh("test -e " .. shell_quote(path))) ~= 0 end
    write_file(dir .. "/split.txt", "8\n0 1\n1 2\n2 3\n4 5\n5 6\n6 7\n")   -- two components
    for i, case in ipairs {
      { "'algorithm={\"epidemic\",s=7}' nodes=6", "^dpy%-lua: epidemic: s = 7 needs more than 6 nodes" },
      { "algorithm=async checkpoint_every=1", "^dpy%-lua: async: checkpoint_every is not supported" },
      { "algorithm=ps reset_optimizer=true", at("reset_optimizer", ": .*not ps's") },
      { "'algorithm={\"fedavg\"}' 'sharing={\"median\"}'", "^dpy%-lua: fedavg: sharing 'median' does not apply" },
      { "'stragglers={factors={1,1,4}}'",
        "^dpy%-lua: command line: stragglers={factors={1,1,4}}: stragglers: factors lists 3 nodes, the config has 8" },
      { "'stragglers={fraction=0.1}'",
        "^dpy%-lua: command line: stragglers={fraction=0.1}: stragglers: fraction = 0.1 needs slowdown %(" },
      { "'stragglers={slowdown=4}'",
        "^dpy%-lua: command line: stragglers={slowdown=4}: stragglers: slowdown = 4 needs fraction %(" },
      { "'stragglers={lognormal=100}'",
        "^dpy%-lua: command line: stragglers={lognormal=100}: stragglers: lognormal = 100 gives node %d a slowdown" },
      { "'churn={{uid=99,leave=1}}'", at("churn", "%[1%]: uid 99 is not a node of the run") },
      { "partition=natural",
        "^dpy%-lua: command line: partition=natural: partition 'natural' needs a dataset with natural groups" },
      { "'partition={\"dirichlet\"}'", "partition: partitioner 'dirichlet': option 'alpha' is required" },
      { "'dataset={\"mnist\",dir=\"" .. dir .. "/none\"}'", "^dpy%-lua: dataset mnist: no train%-images" },
      { "nodes=6 processes=7", at("processes", ": 7 processes for 6 nodes") },
      { "processes=100", at("processes", ": 100 processes for 8 nodes") },
      { "fraction=0.5", at("fraction", ": the share of clients .*; dpsgd samples none") },
      { "algorithm=fedavg round_timeout=5", at("round_timeout", ": .*; fedavg waits by peer_timeout") },
      { "sharing=secure_average round_timeout=5",
        at("round_timeout", ": .*; dpsgd with sharing secure_average waits by peer_timeout") },
      { "sharing=secure_average 'sim_clock={step_seconds=1}'",
        at("sim_clock", ": .*, not dpsgd with sharing secure_average\n") },
      { "sharing=secure_average 'churn={{uid=1,leave=1}}'",
        at("churn", ": .*, not dpsgd with sharing secure_average\n") },
      { "sharing=secure_average 'transforms={{\"uniform_asymmetric_quantization\",bits=8}}'",
        at("transforms", ": secure aggregation .*; dpsgd with sharing secure_average would apply it to none") },
      { "algorithm=secure_fedavg 'transforms={{\"zstd\"}}'",
        at("transforms", ": .*; secure_fedavg would apply it to the server's broadcast alone") },
      { "loss=nll", "^dpy%-lua: loss: nll takes log%-probabilities; model 'cnn' gives logits" },
      { "algorithm=fedavg 'actions={{\"label_flipping\",nodes={0,1}}}'",
        at("actions", "%[1%]: label_flipping: nodes lists 0, not a training node %(1%.%.7%)") },
      { "'graph={\"file\",path=\"" .. dir .. "/split.txt\"}'",
        "^dpy%-lua: command line: graph=[^\n]*: graph: the graph is not connected %(.*split%.txt%)" },
      { "algorithm=ps 'actions={\"differential_privacy\"}'",
        at("actions", "%[1%]: differential_privacy: runs with dpsgd or fedavg") },
      { "task=binary 'actions={\"differential_privacy\"}'",
        at("actions", "%[1%]: differential_privacy: DP%-SGD supports") },
      { "loss=mse 'actions={\"differential_privacy\"}'",
        at("actions", "%[1%]: .*take cross_entropy or nll, not mse") },
      -- each of these reached the nodes: failed them (exit 1, naming a framework file) or ran other than asked
      { "task=binary 'positive_classes={10}'", at("positive_classes", ": binary task: class 10 is not in 0%.%.9") },
      { "'partition={\"dirichlet\",alpha=0.01,min_size=0}' train_samples=40",
        "^dpy%-lua: command line: partition=[^\n]*: partition: dirichlet gives node %d no training samples %(of 40%)" },
      { "'graph={\"star\",center=8}'",
        "^dpy%-lua: command line: graph={\"star\",center=8}: graph: star: center 8 is not a node %(0%.%.7%)" },
      { "'actions={{\"label_flipping\",nodes={1},map={[0]=10}}}'",
        at("actions", "%[1%]: label_flipping: map%[0%] = 10: the data's classes are 0%.%.9") },
      { "'sharing={\"multi_krum\",f=0,m=1<<40}'", "option 'm' must be at most 2147483647" },
      { "'sharing={\"trimmed_mean\",f=3}'", "^dpy%-lua: command line: sharing={\"trimmed_mean\",f=3}: sharing: "
        .. "trimmed_mean: node %d has 4 neighbours, so its rounds aggregate 5 models: trimmed_mean: n = 5, f = 3 is "
        .. "outside what it tolerates %(n > 2f%)" },
      { "peer_timeout=1e300", "config key 'peer_timeout' must be a number > 0 and <= 1000000000, got 1e%+300" },
      { "threads=1e12", "config key 'threads' must be an integer >= 1 and <= 65536" },
    } do
      local out = dir .. "/out-" .. i
      local code, _, err = sh(BIN .. " run " .. dir .. "/eight.lua -q --out " .. out .. " " .. case[1])
      assert.are.equal(2, code, case[1] .. ": " .. err)
      assert.matches(case[2], err)
      assert.not_matches("run failed", err)
      assert.not_matches("%.lua:%d+:", err)   -- a config-level message, not a Lua location
      assert.is_true(absent(out), case[1] .. ": " .. out .. " was written")
    end
    -- dispatch checks each job the same way, before it reads a remote
    write_file(dir .. "/remotes.lua", "return { remotes = { { host = 'nowhere.invalid', processes = 2 } } }\n")
    local out = dir .. "/dispatched"
    local code, _, err = sh(BIN .. " dispatch " .. dir .. "/eight.lua --remotes " .. dir .. "/remotes.lua --jobs 2 "
                            .. "--out " .. out .. " 'stragglers={factors={1,1,4}}'")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua dispatch: command line: stragglers={factors={1,1,4}}: stragglers: factors lists 3 nodes",
                   err)
    assert.is_true(absent(out))
    -- the repl's node too
    code, _, err = sh(BIN .. " repl " .. dir .. "/eight.lua --uid 0 'stragglers={factors={1,1,4}}' < /dev/null")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua repl: command line: stragglers={factors={1,1,4}}: stragglers: factors lists 3 nodes", err)
  end)

  it("refuses a model that does not fit the dataset before writing anything, naming both #checks", function()
    local dir = tmpdir()
    write_file(dir .. "/six.lua", "nodes = 6\nrounds = 1\nlocal_steps = 1\ntrain_samples = 200\n"
                                   .. "test_samples = 50\n")
    write_file(dir .. "/one.lua", "max_steps = 2\ntrain_samples = 200\ntest_samples = 50\n")
    local function absent(path) return (sh("test -e " .. shell_quote(path))) ~= 0 end
    local function fits(model)
      return "^dpy%-lua: command line: model=[^\n]*: model '" .. model
             .. "' does not fit dataset 'fashion_mnist' %(1×28×28 images%): "
    end
    for i, case in ipairs {
      { "six.lua model=lenet", fits("lenet") .. "torch: .*to have 3 channels" },
      { "one.lua model=lenet", fits("lenet") .. "torch: .*to have 3 channels" },
      { "six.lua 'model={\"mlp\",hidden={0}}'",   -- its option's range, before torch's "from is out of bounds"
        "^dpy%-lua: command line: .*option 'hidden' must be a list of integers >= 1, got 0 at %[1%]" },
      { "one.lua 'model={\"mlp\",classes=5}'", fits("mlp") .. "it gives 5 outputs, the dataset has 10 classes" },
      { "six.lua 'model={\"mlp\",classes=1}' loss=mse",
        fits("mlp") .. "it gives 1 output, the dataset has 10 classes" },
      { "six.lua 'model={\"mlp\",classes=10}' task=binary",
        fits("mlp") .. "it gives 10 outputs, a binary task takes 1" },
    } do
      local out = dir .. "/out-" .. i
      local code, _, err = sh(BIN .. " run " .. dir .. "/" .. case[1] .. " -q --out " .. out)
      assert.are.equal(2, code, case[1] .. ": " .. err)
      assert.matches(case[2], err)
      assert.not_matches("%.lua:%d+:", err)
      assert.is_true(absent(out), case[1] .. ": " .. out .. " was written")
    end
    -- a user's model whose own new fails: its error where it is, not the data's
    write_file(dir .. "/m.lua", "return require('dpy.registry').register { kind = 'model', name = 'oops',\n"
                                .. "  new = function() return require('dpy.nn').linear(nil, 2) end }\n")
    local code, _, err = sh(BIN .. " run " .. dir .. "/one.lua -q model=" .. dir .. "/m.lua --out " .. dir .. "/oops")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: model 'oops' %(.*/m%.lua%): new failed: ", err)
    assert.not_matches("does not fit", err)
    -- a user's model that does not fit: named with its file, the one to change
    write_file(dir .. "/m2.lua", "local nn = require('dpy.nn')\n"
                                 .. "return require('dpy.registry').register { kind = 'model', name = 'narrow',\n"
                                 .. "  new = function() return nn.sequential { nn.flatten(), nn.linear(100, 10) }\n"
                                 .. "  end }\n")
    code, _, err = sh(BIN .. " run " .. dir .. "/one.lua -q model=" .. dir .. "/m2.lua --out " .. dir .. "/narrow")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: command line: model=[^\n]*: model 'narrow' %(.*/m2%.lua%) does not fit dataset "
                   .. "'fashion_mnist' %(1×28×28 images%): torch: ", err)
    -- more outputs than classes train (cross entropy over 12 logits, 2 of them never a label)
    code, _, err = sh(BIN .. " run " .. dir .. "/one.lua -q 'model={\"cnn\",classes=12}' --out "
                      .. dir .. "/wide")
    assert.are.equal(0, code, err)
  end)

  it("refuses a test set that cannot be read or does not match the training set, writing nothing #checks", function()
    local dir = tmpdir()
    -- a .npy file of uint8 (images) or int64 (labels) values, as numpy.save writes it
    local function npy(shape, values)
      local header = string.format("{'descr': '%s', 'fortran_order': False, 'shape': (%s,), }",
                                   #shape == 1 and "<i8" or "|u1", table.concat(shape, ", "))
      header = header .. string.rep(" ", (64 - (10 + #header + 1) % 64) % 64) .. "\n"
      local raw = {}
      for i, v in ipairs(values) do raw[i] = string.pack(#shape == 1 and "<i8" or "B", v) end
      return "\x93NUMPY\1\0" .. string.pack("<I2", #header) .. header .. table.concat(raw)
    end
    local function pixels(n) local t = {} for i = 1, n do t[i] = i % 256 end return t end
    -- one numpy dataset a case: 4 training images 8×8 of labels 0..2, the test split as given
    local function numpy_dir(name, test_images, test_labels)
      local d = dir .. "/" .. name
      assert(sh("mkdir -p " .. shell_quote(d)) == 0)
      write_file(d .. "/x.npy", npy({ 4, 8, 8 }, pixels(256)))
      write_file(d .. "/y.npy", npy({ 4 }, { 0, 1, 2, 1 }))
      write_file(d .. "/tx.npy", test_images)
      write_file(d .. "/ty.npy", test_labels)
      return string.format("'dataset={\"numpy\",dir=\"%s\",train_images=\"x.npy\",train_labels=\"y.npy\","
                           .. "test_images=\"tx.npy\",test_labels=\"ty.npy\"}'", d)
    end
    -- image_folder: a test_dir with a class folder the training root lacks
    local folders = REPO .. "/tests/fixtures/images/folder"
    assert(sh("cp -r " .. shell_quote(folders .. "/test") .. " " .. shell_quote(dir .. "/test")
              .. " && cp -r " .. shell_quote(dir .. "/test/cat") .. " " .. shell_quote(dir .. "/test/bird")) == 0)
    -- a dataset of the user's whose test split has a class more
    write_file(dir .. "/two.lua", [[
      local tensor = require "dpy.tensor"
      return require("dpy.registry").register { kind = "dataset", name = "two", new = function(_, ctx)
        return { images = tensor.zeros(4, 1, 8, 8):to("uint8"), labels = tensor.new({ 0, 1, 0, 1 }, "int64"),
                 classes = ctx.train == false and 3 or 2, mean = { 0.5 }, std = { 0.5 }, shape = { 1, 8, 8 } }
      end }]])
    write_file(dir .. "/two.cfg.lua", "nodes = 2\ngraph = 'ring'\nrounds = 1\nlocal_steps = 1\nbatch_size = 2\n"
                                      .. "model = { 'mlp', hidden = { 8 } }\n")
    local function absent(path) return (sh("test -e " .. shell_quote(path))) ~= 0 end
    for i, case in ipairs {
      { numpy_dir("corrupt", "garbage", npy({ 2 }, { 0, 1 })), at("dataset", ": .*/corrupt/tx%.npy: ") },
      { numpy_dir("labels", npy({ 2, 8, 8 }, pixels(128)), npy({ 2 }, { 0, 5 })),
        at("dataset", ": .*/labels/ty%.npy: label 5 at index 1 is outside 0%.%.2 %(classes = 3, the largest "
        .. "training label %+ 1%)\n$") },
      { numpy_dir("shape", npy({ 2, 4, 4 }, pixels(32)), npy({ 2 }, { 0, 1 })),
        "^dpy%-lua: dataset 'numpy': the test set's samples are 1×4×4, the training set's 1×8×8\n$" },
      { string.format("'dataset={\"image_folder\",root=\"%s\",test_dir=\"%s\"}'", folders .. "/train", dir .. "/test"),
        at("dataset", ": image_folder: .*/test/bird: class folder 'bird' is not among root's classes") },
      { string.format("'dataset={\"%s\"}'", dir .. "/two.lua"),
        "^dpy%-lua: dataset 'two' %(.*/two%.lua%): the test set has 3 classes, the training set 2\n$" },
    } do
      local out = dir .. "/out-" .. i
      local code, _, err = sh(BIN .. " run " .. dir .. "/two.cfg.lua -q --out " .. out .. " " .. case[1])
      assert.are.equal(2, code, case[1] .. ": " .. err)
      assert.matches(case[2], err)
      assert.not_matches("%.lua:%d+:", err)
      assert.is_true(absent(out), case[1] .. ": " .. out .. " was written")
    end
    -- a centralized run is checked alike
    write_file(dir .. "/one.cfg.lua", "max_steps = 1\nbatch_size = 2\nmodel = { 'mlp', hidden = { 8 } }\n")
    local code, _, err = sh(BIN .. " run " .. dir .. "/one.cfg.lua -q --out " .. dir .. "/one " .. numpy_dir("shape1",
                            npy({ 2, 4, 4 }, pixels(32)), npy({ 2 }, { 0, 1 })))
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: dataset 'numpy': the test set's samples are 1×4×4, the training set's 1×8×8\n$", err)
    assert.is_true(absent(dir .. "/one"))
  end)

  it("refuses a port another program listens on before writing anything #checks", function()
    local host = require "dpy.host.core"
    local dir = tmpdir()
    write_file(dir .. "/six.lua", "nodes = 6\nrounds = 1\nlocal_steps = 1\ntrain_samples = 200\n"
                                   .. "test_samples = 50\n")
    local port, fd
    for _ = 1, 20 do   -- a port nobody else holds, held here
      port = 20000 + math.random(0, 9000)
      fd = host.listen("127.0.0.1", port)
      if fd and host.port_free("127.0.0.1", port + 1) then break end
      if fd then host.close(fd) end
      fd = nil
    end
    assert(fd, "no free port to hold")
    local out = dir .. "/out"
    local run = BIN .. " run " .. dir .. "/six.lua -q processes=2 port=" .. port .. " --out " .. out
    local code, _, err = sh(run)
    host.close(fd)
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: port: cannot listen on 127%.0%.0%.1:" .. port .. ": Address already in use", err)
    assert.not_matches("run failed", err)
    assert.is_true((sh("test -e " .. shell_quote(out))) ~= 0, out .. " was written")
    code, _, err = sh(run)   -- the port free again, the same --out runs
    assert.are.equal(0, code, err)
  end)

  it("builds the one node of a centralized config in the repl, its epochs and max_steps kept", function()
    local code, out, err = sh("echo 'print(node.uid, node.cfg.epochs)' | " .. BIN
                              .. " repl configs/centralized.lua train_samples=600 test_samples=100")
    assert.are.equal(0, code, err)
    assert.matches("\n0\t2\n", out)
    assert.matches("node 0 of 1 (centralized): ", out, 1, true)   -- not the decentralized default's name
    -- and the keys of a node, which that node reads
    code, out, err = sh("echo 'print(#node.cfg.actions, node.cfg.reset_optimizer)' | " .. BIN
                        .. " repl configs/centralized.lua train_samples=600 test_samples=100 "
                        .. "'actions={\"model_norm\"}' reset_optimizer=true")
    assert.are.equal(0, code, err)
    assert.matches("\n1\ttrue\n", out)
  end)

  it("refuses a centralized run's missing dataset before writing anything", function()
    local dir = tmpdir()
    write_file(dir .. "/nodata.lua", "dataset = { 'mnist', dir = '" .. dir .. "/none' }\n")
    local code, _, err = sh(BIN .. " run " .. dir .. "/nodata.lua --out " .. dir .. "/out")
    assert.are.equal(2, code)
    assert.matches("^dpy%-lua: dataset: .*no train%-images%-idx3%-ubyte", err)
    assert.is_nil(io.open(dir .. "/out"))
  end)
end)

describe("dpy-lua repl", function()
  it("prints values, survives an error, and goes on", function()
    local input = "1 + 1\nerror('boom')\nlocal t = tensor.ones(2)\nfunction f(x)\nreturn x * 3\nend\n"
                .. "f(4), tensor.arange(3)\n{ a = 1 }\n"
    local dir = tmpdir()
    write_file(dir .. "/in.txt", input)
    local code, out, err = sh(BIN .. " repl < " .. dir .. "/in.txt")
    assert.are.equal(0, code)
    assert.matches("^2\n", out)
    assert.matches("boom", err)
    assert.matches("12\tdpy.Tensor%(int64, cpu, %[3%]%)\n%[0, 1, 2%]\n", out)
    assert.matches("{ a = 1 }", out)
  end)

  it("continues an unfinished expression on the next line, as it does a statement", function()
    local dir = tmpdir()
    write_file(dir .. "/in.txt", "1 +\n2\nx = 10 *\n3\nx\nprint(\n4)\n(1 +\n)\n7 *\n")
    local code, out, err = sh(BIN .. " repl < " .. dir .. "/in.txt")
    assert.are.equal(0, code)
    assert.are.equal("3\n30\n4\n", out)
    -- an expression that cannot be finished is named as one; one the input ends inside, too
    assert.are.equal("stdin:2: unexpected symbol near ')'\nstdin:1: unexpected symbol near <eof>\n", err)
  end)

  it("completes names, fields and methods with Tab on a terminal, and help lists a value's API", function()
    local dir = tmpdir()
    -- a terminal (script(1)): Tab completes tensor.ze to tensor.zeros, and x:num to x:numel. The
    -- last line typed ends the prompt: script passes on the end of its input only when the prompt
    -- has read what came before within 2 s, and a slow start (a loaded machine, ASan) hung here
    local typed = "(printf 'x = tensor.ze\\t(3)\\n'; sleep 1; printf 'print(\"n=\" .. x:num\\t())\\n'; sleep 1; "
                  .. "printf 'os.exit(0)\\n') | "
                  .. "HOME=" .. dir .. " script -qfc " .. shell_quote(DPY_BIN .. " repl") .. " /dev/null"
    local code, out = sh("timeout 120 bash -c " .. shell_quote(typed))
    assert.are.equal(0, code)
    assert.matches("n=3", out)
    local help
    code, help = sh("printf 'help(nn.linear(2, 2))\\nhelp(nn)\\n' | " .. BIN .. " repl")
    assert.are.equal(0, code)
    assert.matches("dpy.Module: [^\n]*:forward%(%), [^\n]*:set_flat%(%)", help)
    assert.matches("table: [^\n]*conv2d%(%), [^\n]*linear%(%)", help)
  end)

  it("shows a node's neighbours as integers, and leaves no directory behind #e2e", function()
    local code, out, err = sh("printf 'node:neighbours()\\nhelp(node)\\n"
                              .. "print(table.concat(require(\"dpy.help\").complete(\"node.tr\"), \" \"))\\n"
                              .. "print(select(2, pcall(node.endpoint.run, node.endpoint, print)))\\n"
                              .. "require(\"dpy.host.core\").pid()\\n' | " .. BIN
                              .. " repl " .. REPO .. "/configs/0_baseline.lua --uid 1")
    assert.are.equal(0, code, err)
    assert.matches("\n{ %d+, %d+, %d+, %d+ }\n", out)
    -- help(node) and Tab list what the banner names: the node's methods and components
    local help = assert(out:match("\n(dpy%.Node: [^\n]*)\n"), out)
    for _, name in ipairs { ":train()", ":evaluate()", ":neighbours()", "model (", "optimizer (", "loader (" } do
      assert.truthy(help:find(name, 1, true), help)
    end
    assert.matches("\nnode%.train node%.train_set node%.trainer\n", out)
    -- ep:run is the node thread's own (it turns the run's interrupt off after it): not the prompt's
    assert.matches("ep:run: only the node's own thread runs its rounds", out)
    local pid = assert(out:match("\n(%d+)\n$"), out)   -- the prompt's process: its scratch directory is gone
    assert.is_nil(io.open("/tmp/dpy-repl-" .. pid), "/tmp/dpy-repl-" .. pid .. " is left")
  end)

  it("says in its banner that the node is one an action poisons: it trains on flipped labels", function()
    local dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN .. "actions = { { 'label_flipping', nodes = { 1 } } }\n")
    local code, out, err = sh("printf 'node.uid\\n' | " .. BIN .. " repl " .. dir .. "/c.lua --uid 1")
    assert.are.equal(0, code, err)
    assert.matches("^node 1 of 4 %(dpsgd; poisoned by label_flipping%): ", out)
    code, out, err = sh("printf 'node.uid\\n' | " .. BIN .. " repl " .. dir .. "/c.lua --uid 2")
    assert.are.equal(0, code, err)
    assert.matches("^node 2 of 4 %(dpsgd%): ", out)
  end)

  it("reports a script's own error when Ctrl-C comes while the error is handled, and nothing after", function()
    local dir = tmpdir()
    write_file(dir .. "/s.lua", [[
      local h = require "dpy.host.core"
      error(setmetatable({}, { __tostring = function() h.kill(h.pid(), 2); h.sleep(0.2); return "mine" end }))]])
    local code, _, err = sh(BIN .. " " .. dir .. "/s.lua")
    assert.are.equal(1, code)
    assert.are.equal("dpy-lua: mine\n", err)
  end)

  it("interrupts a long computation on Ctrl-C and keeps the prompt", function()
    local dir = tmpdir()
    -- the loop marks that it runs; only then does the writer send SIGINT (at most 30 s wait)
    local script = string.format(
      "(printf 'io.open(\"%s/ready\", \"w\"):close(); while true do end\n'; "
      .. "for i in $(seq 300); do [ -e %s/ready ] && break; sleep 0.1; done; sleep 0.3; "
      .. "kill -INT $(cat %s/pid); printf '6 * 7\n') | "
      .. "(echo $BASHPID > %s/pid; exec %s repl)", dir, dir, dir, dir, BIN)
    local code, out, err = sh("timeout 120 bash -c " .. shell_quote(script))
    assert.are.equal(0, code)
    assert.matches("interrupted!", err)
    assert.matches("42", out)
  end)
end)
