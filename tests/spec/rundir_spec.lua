-- A run directory holds all it takes to rerun its run bit for bit: the command, the effective
-- config, every file the run used, the versions; `dpy-lua run DIR` reruns it into a new directory.
local metrics = require "dpy.metrics"
local config = require "dpy.config"
local dpy = require "dpy"

local BIN = shell_quote(DPY_BIN)

-- A small centralized run: 30 steps on 2000 samples.
local TINY = "seed = 3\nbatch_size = 16\nmax_steps = 30\neval_every = 15\ntrain_samples = 2000\ntest_samples = 500\n"

-- A node's series that do not depend on timing (all but the *_seconds ones).
local function numbers(out, uid)
  local m = assert(node_metrics(out, uid), out .. ": no metrics of node " .. uid)
  local kept = {}
  for k, v in pairs(m) do
    if not k:match("seconds") then kept[k] = v end
  end
  assert.truthy(kept.test_accuracy and kept.train_loss, out .. ": no accuracy or loss of node " .. uid)
  return kept
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The git checkout holding the dpy Lua tree this binary (and this busted) uses.
local function lua_tree()
  return (package.searchpath("dpy", package.path):match("^(.*)/dpy/init%.lua$"))
end

describe("a run directory", function()
  it("records the command, the effective config, every file used, the versions; and reruns bit for bit #e2e", function()
    local dir = tmpdir()
    assert(require("dpy.host.core").mkdir_p(dir .. "/parts"))
    assert(require("dpy.host.core").mkdir_p(dir .. "/acts"))
    local noisy = read_file(REPO .. "/configs/actions/noisy_model.lua")
    write_file(dir .. "/acts/noisy.lua", noisy)
    write_file(dir .. "/parts/tiny.lua", TINY_RUN)
    write_file(dir .. "/parts/base.lua", "include 'tiny.lua'\nrounds = 2\n")   -- relative to parts/
    local source = "include 'parts/base.lua'\n"
                   .. "actions = { { '" .. dir .. "/acts/noisy.lua', nodes = { 1 }, sigma = 0.5 } }\n"
    write_file(dir .. "/c.lua", source)
    local args = { "run", "c.lua", "local_steps=2", "optimizer={'sgd',lr=0.05}", "--out", "out1", "-q" }
    local quoted = {}
    for i, a in ipairs(args) do quoted[i] = shell_quote(a) end
    local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " " .. table.concat(quoted, " "))
    assert.are.equal(0, code, err)
    local out1 = dir .. "/out1"

    local manifest = assert(metrics.read(out1 .. "/manifest.json"))
    assert.are.same(args, manifest.command.argv)
    assert.are.equal(dir, manifest.command.cwd)
    assert.are.equal(dpy.version, manifest.dpy_lua)
    assert.are.equal(select(2, sh(BIN .. " --version")):match("\nbuild (%x+)"), manifest.build)
    -- the commit of dpy-lua's own tree, though the run's cwd is no git checkout
    local tree = lua_tree()
    local rc, head = sh("git -C " .. shell_quote(tree) .. " rev-parse HEAD")
    assert.are.equal(0, rc)
    assert.are.equal(head:match("%x+"), manifest.dpy_lua_git.commit)
    local _, status = sh("git -C " .. shell_quote(tree) .. " status --porcelain")
    assert.are.equal(status ~= "", manifest.dpy_lua_git.dirty)

    -- the effective config: runnable, every key as run
    local effective = assert(read_file(out1 .. "/config.effective.lua"))
    for _, line in ipairs { "rounds = 2", "local_steps = 2", 'optimizer = { "sgd", lr = 0.05 }', "seed = 2",
                            "eval_batch_size = 100", 'name = "c"', 'algorithm = "dpsgd"' } do
      assert.truthy(effective:find("\n" .. line .. "\n", 1, true), "missing: " .. line)
    end
    assert.is_nil(effective:find("include", 1, true))
    -- the same config, but for the files it uses: the run directory's copies (relative to it)
    local original = config.load(dir .. "/c.lua", { "local_steps=2", "optimizer={'sgd',lr=0.05}" })
    local rerun = config.load(out1 .. "/config.effective.lua")
    assert.are.equal(dir .. "/acts/noisy.lua", original.actions[1][1])
    assert.are.equal(out1 .. "/acts/noisy.lua", rerun.actions[1][1])
    rerun.actions[1][1] = original.actions[1][1]
    assert.are.same(original, rerun)

    -- every file, at its path relative to the config's directory
    assert.are.equal(source, read_file(out1 .. "/config.lua"))
    assert.are.equal("include 'tiny.lua'\nrounds = 2\n", read_file(out1 .. "/parts/base.lua"))
    assert.are.equal(TINY_RUN, read_file(out1 .. "/parts/tiny.lua"))
    assert.are.equal(noisy, read_file(out1 .. "/acts/noisy.lua"))

    -- the originals change or go: the rerun uses the run directory's copies
    os.remove(dir .. "/acts/noisy.lua")
    write_file(dir .. "/parts/tiny.lua", (TINY_RUN:gsub("seed = 2", "seed = 9")))
    code, _, err = sh("cd / && " .. BIN .. " run " .. out1 .. " --out " .. dir .. "/out2 -q")
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      assert.are.same(numbers(out1, uid), numbers(dir .. "/out2", uid))
    end
    assert.matches("noisy_model: sending models with noise sigma 0.5", read_file(dir .. "/out2/1.log"))
    local m2 = assert(metrics.read(dir .. "/out2/manifest.json"))
    assert.are.same({ "run", out1, "--out", dir .. "/out2", "-q" }, m2.command.argv)
    assert.are.equal(out1, m2.rerun_of)

    -- a rerun of the rerun: the same numbers again
    code, _, err = sh(BIN .. " run " .. dir .. "/out2 --out " .. dir .. "/out3 -q")
    assert.are.equal(0, code, err)
    assert.are.same(numbers(out1, 1), numbers(dir .. "/out3", 1))

    -- never into itself
    code, _, err = sh(BIN .. " run " .. out1 .. " --out " .. out1 .. " --force -q")
    assert.are.equal(2, code)
    assert.matches("cannot rerun .*out1 into itself", err)
    assert.truthy(exists(out1 .. "/0.metrics.json"))
  end)

  it("reruns a centralized run with its --seed", function()
    local dir = tmpdir()
    write_file(dir .. "/tiny.lua", TINY)
    local code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --seed 5 --out " .. dir .. "/a -q")
    assert.are.equal(0, code, err)
    assert.matches("\nseed = 5\n", read_file(dir .. "/a/config.effective.lua"))
    code, _, err = sh(BIN .. " run " .. dir .. "/a/ --out " .. dir .. "/b -q")
    assert.are.equal(0, code, err)
    assert.are.same(numbers(dir .. "/a", 0), numbers(dir .. "/b", 0))
  end)

  it("records no commit when dpy-lua's Lua tree is no git checkout", function()
    local dir = tmpdir()
    assert.are.equal(0, (sh("cp -r " .. shell_quote(lua_tree()) .. " " .. dir .. "/lua")))
    -- a model that fails as it trains (the config check passes it in eval mode): the run fails after its
    -- directory is written
    write_file(dir .. "/boom.lua", "local nn = require 'dpy.nn'\n"
                                   .. "return require('dpy.registry').register { kind = 'model', name = 'boom', "
                                   .. "new = function() return nn.module { f = nn.flatten(), fc = nn.linear(784, 10), "
                                   .. "forward = function(self, x) if self:is_training() then error('boom') end "
                                   .. "return self.fc(self.f(x)) end } end }\n")
    write_file(dir .. "/fails.lua", "max_steps = 1\ntrain_samples = 100\ntest_samples = 10\nmodel = 'boom.lua'\n")
    local code = sh("DPY_LUA_PATH=" .. dir .. "/lua " .. BIN .. " run " .. dir .. "/fails.lua --out " .. dir .. "/out")
    assert.are.equal(1, code)
    local manifest = assert(metrics.read(dir .. "/out/manifest.json"))
    assert.is_nil(manifest.dpy_lua_git)
    assert.are.equal("0.1.0", manifest.dpy_lua)
  end)

  it("is not overwritten by --out unless --force, which replaces it", function()
    local dir = tmpdir()
    write_file(dir .. "/tiny.lua", TINY)
    local old = dir .. "/old"
    assert(require("dpy.host.core").mkdir_p(old))
    write_file(old .. "/manifest.json", "{}")
    write_file(old .. "/7.metrics.json", "{}")
    local code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. old .. " -q")
    assert.are.equal(2, code)
    assert.truthy(err:find(old, 1, true), err)
    assert.matches("%-%-force", err)
    assert.are.equal("{}", read_file(old .. "/manifest.json"))
    code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. old .. " --force -q")
    assert.are.equal(0, code, err)
    assert.is_false(exists(old .. "/7.metrics.json"), "the old run's files are gone")
    assert.truthy(node_metrics(old, 0))
    -- an existing directory that holds no run is used as it is
    local empty = dir .. "/empty"
    assert(require("dpy.host.core").mkdir_p(empty))
    code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. empty .. " -q")
    assert.are.equal(0, code, err)
  end)

  it("touches no file that is not a run's: a directory holding others is refused, --force or not", function()
    local dir = tmpdir()
    write_file(dir .. "/tiny.lua", TINY)
    local mine = dir .. "/mine"   -- a researcher's own files, no run
    assert(require("dpy.host.core").mkdir_p(mine))
    write_file(mine .. "/results.csv", "a,b\n")
    write_file(mine .. "/config.lua", "-- mine\n")
    for _, force in ipairs { "", " --force" } do
      local code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. mine .. force .. " -q")
      assert.are.equal(2, code, err)
      assert.matches("mine holds files that are no run's %(config.lua, results.csv%)", err)
      assert.are.equal("a,b\n", read_file(mine .. "/results.csv"))
      assert.are.equal("-- mine\n", read_file(mine .. "/config.lua"))
      assert.is_false(exists(mine .. "/manifest.json"))
    end
    -- a file where the directory would be, or on its way: a usage error before anything runs (it failed
    -- after the config check, exit 1, "run failed: ... exists and is not a directory")
    write_file(dir .. "/afile", "mine\n")
    for _, out in ipairs { dir .. "/afile", dir .. "/afile/sub" } do
      for _, force in ipairs { "", " --force" } do
        local code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. out .. force .. " -q")
        assert.are.equal(2, code, err)
        assert.matches("--out " .. (dir .. "/afile"):gsub("%p", "%%%0") .. ": a file, not a directory: choose "
                       .. "another %-%-out", err)
        assert.are.equal("mine\n", read_file(dir .. "/afile"))
      end
    end
    -- a run with a file of someone else's beside it: --force replaces the run, not that file
    local code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. dir .. "/run -q")
    assert.are.equal(0, code, err)
    write_file(dir .. "/run/notes.txt", "keep\n")
    code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. dir .. "/run --force -q")
    assert.are.equal(2, code, err)
    assert.matches("run holds files that are no run's %(notes.txt%)", err)
    assert.are.equal("keep\n", read_file(dir .. "/run/notes.txt"))
    assert.truthy(node_metrics(dir .. "/run", 0), "the run stays as it was")
    os.remove(dir .. "/run/notes.txt")
    code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. dir .. "/run --force -q")
    assert.are.equal(0, code, err)
    -- a run directory a full disk stopped before its manifest: its config.lua is the run's own
    local half = dir .. "/half"
    assert(require("dpy.host.core").mkdir_p(half))
    write_file(half .. "/config.lua", read_file(dir .. "/tiny.lua"))
    write_file(half .. "/config.effective.lua", "-- cut short\n")
    code, _, err = sh(BIN .. " run " .. dir .. "/tiny.lua --out " .. half .. " -q")
    assert.are.equal(0, code, err)
  end)

  it("is not made when the config is wrong", function()
    local dir = tmpdir()
    local cases = {
      { TINY_RUN .. "graph = { 'regular', degree = 9 }\n", "no 9%-regular graph on 4 nodes" },
      { TINY_RUN .. "faults = { drop = function() end }\n", "config key 'faults': option 'drop' must be a number" },
      { TINY_RUN .. "actions = { '" .. dir .. "/none.lua' }\n", "none%.lua" },
      { TINY_RUN .. "batch_sise = 3\n", "unknown config key 'batch_sise'" },
    }
    for i, c in ipairs(cases) do
      write_file(dir .. "/c.lua", c[1])
      local out = dir .. "/out" .. i
      local code, _, err = sh(BIN .. " run " .. dir .. "/c.lua --out " .. out)
      assert.are.equal(2, code, err)
      assert.matches(c[2], err)
      assert.is_false(exists(out .. "/manifest.json"), out)
      assert.is_false(exists(out), out .. " was made")
    end
    local code, _, err = sh(BIN .. " run " .. dir .. " --out " .. dir .. "/out9")
    assert.are.equal(2, code)
    assert.matches("not a run directory %(no config%.effective%.lua%)", err)
    assert.is_false(exists(dir .. "/out9"))
  end)
end)
