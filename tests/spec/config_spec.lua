-- dpy.config: every mistake is reported with the config's file and line.
local config = require "dpy.config"

local function write_config(text)
  local path = tmpdir() .. "/c.lua"
  write_file(path, text)
  return path
end

local function load_error(text, overrides)
  local path = write_config(text)
  local ok, err = pcall(config.load, path, overrides)
  assert.is_false(ok)
  return err, path
end

-- The same for a decentralized config: text, then nodes = 2 on the line after
local function nodes_error(text, overrides) return load_error(text .. "\nnodes = 2", overrides) end

describe("config loading", function()
  it("fills defaults and keeps what was set", function()
    local cfg = config.load(write_config("epochs = 3\nlocal lr = 0.1\noptimizer = { 'sgd', lr = lr }\n"))
    assert.are.equal(3, cfg.epochs)
    assert.are.equal(0.1, cfg.optimizer.lr)
    assert.are.equal(32, cfg.batch_size)
    assert.are.equal("c", cfg.name)
  end)

  it("includes another config, relative to the including file, naming its lines in errors", function()
    local dir = tmpdir()
    write_file(dir .. "/base.lua", "nodes = 8\nrounds = 5\n")
    write_file(dir .. "/variant.lua", "include 'base.lua'\nrounds = 7\n")
    local cfg, _, included = config.load(dir .. "/variant.lua")
    assert.are.same({ 8, 7, "variant" }, { cfg.nodes, cfg.rounds, cfg.name })
    assert.are.same({ { path = "base.lua", full = dir .. "/base.lua" } }, included)
    write_file(dir .. "/base.lua", "nodes = 8\nroundz = 5\n")
    local ok, err = pcall(config.load, dir .. "/variant.lua")
    assert.is_false(ok)
    assert.are.equal(dir .. "/base.lua:2: unknown config key 'roundz' (did you mean 'rounds'?)", err)
    write_file(dir .. "/loop.lua", "include 'loop.lua'\n")
    _, err = pcall(config.load, dir .. "/loop.lua")
    assert.matches("include: nested too deep %(a cycle%?%)", err)
    write_file(dir .. "/gone.lua", "nodes = 8\ninclude 'nope.lua'\n")
    _, err = pcall(config.load, dir .. "/gone.lua")
    assert.matches("gone.lua:2: include: cannot read " .. dir .. "/nope.lua", err, 1, true)
  end)

  it("names the file and line of an unknown key, with the nearest valid one", function()
    local err, path = load_error("seed = 1\n\nepocs = 2\n")
    assert.are.equal(path .. ":3: unknown config key 'epocs' (did you mean 'epochs'?)", err)
  end)

  it("names wrong types and bounds", function()
    assert.matches([[:1: config key 'batch_size' must be an integer >= 1, got the string "big"]],
                   load_error("batch_size = 'big'"))
    assert.matches(":2: config key 'epochs' must be an integer >= 1, got 0", load_error("\nepochs = 0"))
    assert.matches("must be one of .* %(did you mean 'cross_entropy'%?%)", load_error("loss = 'cross_entrpy'"))
  end)

  it("refuses fault options it does not know, and probabilities outside [0, 1]", function()
    assert.matches(":1: config key 'faults': unknown option 'dorp' %(did you mean 'drop'%?%)",
                   nodes_error("faults = { dorp = 0.5 }"))
    assert.matches("config key 'faults': option 'drop' must be a number >= 0 and <= 1, got 1.5",
                   nodes_error("faults = { drop = 1.5 }"))
    assert.matches("config key 'faults': option 'corrupt' must be a number >= 0 and <= 1, got %-0.1",
                   nodes_error("faults = { corrupt = -0.1 }"))
    assert.matches("config key 'faults': option 'delay' must be a number >= 0 and <= 1000000000, got %-1",
                   nodes_error("faults = { delay = -1 }"))
    assert.matches("config key 'faults' must be a table, got 0.5", nodes_error("faults = 0.5"))
    local cfg = config.load(write_config("faults = { drop = 0.1, duplicate = 0, corrupt = 1, delay = 0.02 }\n"
                                         .. "nodes = 2"))
    assert.are.same({ drop = 0.1, duplicate = 0, corrupt = 1, delay = 0.02 }, cfg.faults)
  end)

  it("refuses a port outside 1024..65535, a fraction <= 0 and a negative peer_timeout", function()
    assert.matches("config key 'port' must be an integer >= 1024 and <= 65535, got 70000", nodes_error("port = 70000"))
    assert.matches("config key 'port' must be an integer >= 1024 and <= 65535, got 80", nodes_error("port = 80"))
    assert.matches("config key 'fraction' must be a number > 0 and <= 1, got %-1", nodes_error("fraction = -1"))
    assert.matches("config key 'peer_timeout' must be a number > 0 and <= 1000000000, got %-1",
                   nodes_error("peer_timeout = -1"))
    assert.matches("command line: port=70000: config key 'port'", nodes_error("", { "port=70000" }))
    -- the highest port a process listens on: port + processes - 1
    assert.are.equal(65535, config.load(write_config("port = 65535\nnodes = 2")).port)
  end)

  -- each ran and misled: an infinite or 1e300 s wait spun a node forever (its deadline past what a
  -- timespec holds), faults = { 0.5 } injected nothing, a slowdown of 0 or -1 ran the clock backwards,
  -- threads or slots past a C int failed the run (exit 1) as "threads must be >= 1"
  it("refuses a wait no clock can hold, an unnamed entry in a table of options, a slowdown <= 0", function()
    assert.matches(":1: config key 'peer_timeout' must be a number > 0 and <= 1000000000, got inf",
                   nodes_error("peer_timeout = math.huge"))
    assert.matches("config key 'round_timeout' must be a number > 0 and <= 1000000000, got 1e%+300",
                   nodes_error("round_timeout = 1e300"))
    assert.matches("config key 'faults': option 'latency' must be a number >= 0 and <= 1000000000, got 1e%+300",
                   nodes_error("faults = { latency = 1e300 }"))
    -- a message of b bytes waits b / bandwidth: 1e-300 bytes a second waited past what a timespec holds
    assert.matches("config key 'faults': option 'bandwidth' must be a number >= 1, got 1e%-300",
                   nodes_error("faults = { bandwidth = 1e-300 }"))
    assert.matches("config key 'faults': options are named %(key = value%), got 0.5 at position %[1%]",
                   nodes_error("faults = { 0.5 }"))
    assert.matches("config key 'stragglers': option 'factors' must be a list of numbers > 0 and <= 1000000000, got 0 "
                   .. "at %[2%]",
                   nodes_error("stragglers = { factors = { 1, 0 } }"))
    assert.matches("config key 'stragglers': option 'slowdown' must be a number > 0 and <= 1000000000, got inf",
                   nodes_error("stragglers = { fraction = 0.5, slowdown = 1 / 0 }"))
    -- 1e300 passed and failed its nodes at their wait of (slowdown - 1) x their training (host.sleep's limit)
    assert.matches(":1: config key 'stragglers': option 'slowdown' must be a number > 0 and <= 1000000000, "
                   .. "got 1e%+300", nodes_error("stragglers = { fraction = 0.5, slowdown = 1e300 }"))
    assert.matches("option 'factors' must be a list of numbers > 0 and <= 1000000000, got 1e%+300 at %[2%]",
                   nodes_error("stragglers = { factors = { 1, 1e300 } }"))
    assert.matches("config key 'threads' must be an integer >= 1 and <= 65536, got 1099511627776",
                   load_error("threads = 1 << 40"))
    assert.matches("config key 'slots' must be an integer >= 1 and <= 65536, got 1099511627776",
                   nodes_error("slots = 1 << 40"))
    assert.are.equal(1e9, config.load(write_config("peer_timeout = 1e9\nnodes = 2")).peer_timeout)
  end)

  -- an integral float passed as an integer and reached code that takes none: seed = 2.0 (or
  -- seed=1e6 on the command line) was refused by the partition as "dpy.random.new: an integer seed
  -- expected", a straggler draw or an action's the same, naming simclock.lua or actions.lua
  it("takes an integral float where an integer belongs as that integer, in keys and options", function()
    local cfg = config.load(write_config("seed = 2.0\nnodes = 1e1\ngraph = { 'regular', degree = 4.0 }\n"
                                         .. "model = { 'mlp', hidden = { 8.0 } }\nfaults = { drop = 0.5 }\n"),
                            { "rounds=5e0", "partition={'iid', seed=3.0}" })
    for _, v in ipairs { cfg.seed, cfg.nodes, cfg.rounds, cfg.graph.degree, cfg.model.hidden[1], cfg.partition.seed } do
      assert.are.equal("integer", math.type(v))
    end
    assert.are.same({ 2, 10, 5, 4, 8, 3 }, { cfg.seed, cfg.nodes, cfg.rounds, cfg.graph.degree, cfg.model.hidden[1],
                                            cfg.partition.seed })
    assert.are.equal("float", math.type(cfg.faults.drop))
    assert.is_truthy(require("dpy.random").new(cfg.seed * 7919 + 13))   -- what refused 2.0
  end)

  it("names misspelt components and their options", function()
    assert.matches(":1: model: no model named 'cnm' %(did you mean 'cnn'%?%)", load_error("model = 'cnm'"))
    assert.matches(":2: optimizer: optimizer 'sgd': unknown option 'moment' %(did you mean 'momentum'%?%)",
                   load_error("\noptimizer = { 'sgd', moment = 0.9 }"))
  end)

  it("refuses undefined variables and reports syntax errors", function()
    assert.matches(":1: undefined variable 'undefined_thing'", load_error("epochs = undefined_thing"))
    assert.matches(":1: syntax error near '2'", load_error("epochs 2"))
    -- a misspelt name gets the nearest one; a config key read before the config set it says so
    assert.matches(":2: undefined variable 'nodez' %(did you mean 'nodes'%?%)",
                   load_error("nodes = 8\nrounds = nodez * 2"))
    assert.matches(":2: config key 'batch_size' is read before the config set it: a key reads as a variable once "
                   .. "set %(its default, 32, comes after the config has run%)",
                   load_error("nodes = 8\nlocal_steps = 1000 // batch_size"))
  end)

  it("applies KEY=VALUE overrides, checked the same way", function()
    local cfg = config.load(write_config("epochs = 3"), { "epochs=1", "dataset=mnist" })
    assert.are.equal(1, cfg.epochs)
    assert.are.equal("mnist", cfg.dataset)
    assert.matches([[command line: epochs=x: config key 'epochs' must be an integer >= 1, got the string "x"]],
                   load_error("", { "epochs=x" }))
    assert.matches("command line: 'epochs' is not KEY=VALUE", load_error("", { "epochs" }))
    -- a value that reads as Lua but does not parse is not taken as a string
    assert.matches([[command line: graph={"ring": not a Lua value %(.*'}' expected.*%)]],
                   load_error("nodes = 4\n", { 'graph={"ring"' }))
    assert.are.equal("ring", config.load(write_config("nodes = 4\n"), { "graph=ring" }).graph)
    -- nodes=4,8 ran 4 nodes: the values after the first were dropped without a word
    assert.matches("command line: nodes=4,8: 2 values; give one %(a list: nodes={4,8}%)",
                   load_error("", { "nodes=4,8" }))
    assert.are.equal("a,b", config.load(write_config("nodes = 4\n"), { "name=a,b" }).name)   -- no value: a string
  end)

  -- stragglers=nil was taken as the string "nil" and refused: a baseline without the config's stragglers had to
  -- copy the config
  it("takes KEY=nil as the key unset, back to its default, and says where", function()
    local path = write_config("nodes = 4\nstragglers = { factors = { 1, 1, 4, 1 } }\nname = 'x'\n"
                              .. "sim_clock = { step_seconds = 0.05 }\n")
    local cfg = config.load(path, { "stragglers=nil", "name= nil ", "sim_clock=nil" })
    assert.is_nil(cfg.stragglers)
    assert.is_nil(cfg.sim_clock)
    assert.are.equal("c", cfg.name, "the default name: the config file's")
    assert.are.equal("command line: stragglers=nil", config.where(cfg, "stragglers"))
    assert.matches("command line: stragglrs=nil: unknown config key 'stragglrs' %(did you mean 'stragglers'",
                   load_error("", { "stragglrs=nil" }))
    assert.are.equal("nil", config.load(write_config(""), { "name='nil'" }).name, "a quoted nil is the string")
    -- unsetting nodes makes the run centralized: the file's decentralized keys are named
    assert.matches("c%.lua:2: config key 'rounds' is for decentralized runs; this one is centralized",
                   load_error("nodes = 4\nrounds = 2\n", { "nodes=nil" }))
  end)

  it("refuses a key of the other kind of run, which would be ignored, naming where it was set", function()
    assert.matches("c.lua:3: config key 'epochs' is for centralized runs; this one is decentralized",
                   load_error("nodes = 4\nrounds = 2\nepochs = 3\n"))
    assert.matches("c.lua:1: config key 'max_steps' is for centralized runs",
                   load_error("max_steps = 9", { "nodes=4" }))
    assert.matches("command line: rounds=5: config key 'rounds' is for decentralized runs; this one is centralized",
                   load_error("epochs = 1\n", { "rounds=5" }))
    assert.matches("config key 'local_steps' is for decentralized runs", load_error("local_steps = 3\n"))
    -- every key a centralized run does not read: its differential_privacy action would train without noise
    for line, key in ipairs { "actions = { 'differential_privacy' }", "algorithm = 'fedavg'", "fraction = 0.5",
                              "graph = 'ring'", "processes = 4", "transforms = { { 'zstd' } }", "encrypt = true" } do
      local text = "epochs = 1\n" .. string.rep("\n", line) .. key .. "\nseed = 3\n"
      assert.matches("c.lua:" .. (line + 2) .. ": config key '" .. key:match("^%w+") .. "' is for decentralized runs",
                     load_error(text))
    end
    -- several: the first one set is named
    assert.matches("c.lua:2: config key 'sharing'", load_error("epochs = 1\nsharing = 'average'\nport = 2000\n"))
    assert.are.equal(2, config.load(write_config("nodes = 4\nrounds = 2\n")).rounds)
    -- a run directory's effective config of before held them: the run ignored them, and so does its rerun
    local old = tmpdir() .. "/config.effective.lua"
    write_file(old, "nodes = 4\nrounds = 2\nepochs = 2\nmax_steps = 7\n")
    local cfg = config.load(old)
    assert.are.same({ 4, 2 }, { cfg.nodes, cfg.rounds })
    assert.is_nil(cfg.epochs)
    assert.is_nil(cfg.max_steps)
    write_file(old, "epochs = 2\nprocesses = 1\nactions = {}\nhuge_pages = true\n")
    cfg = config.load(old)
    assert.are.same({ 2 }, { cfg.epochs, cfg.processes, cfg.actions, cfg.huge_pages })
  end)

  it("reports a missing config file", function()
    local ok, err = pcall(config.load, "/nonexistent/x.lua")
    assert.is_false(ok)
    assert.matches("cannot read config: /nonexistent/x.lua", err)
  end)
end)

-- Settings that another quietly overrode or made moot ran without a word: positive_classes with a
-- multiclass task, local_steps beside local_epochs, churn's leave_rounds at or past rounds. A config
-- that includes another may set both, so each is a warning naming both keys and the one that wins.
describe("config warnings", function()
  it("names both keys, where each was set, and which one wins, one line each", function()
    local path = write_config("nodes = 4\nrounds = 5\nlocal_steps = 3\nlocal_epochs = 2\npositive_classes = { 1 }\n"
                              .. "churn = { fraction = 0.5, leave_rounds = 5 }\n")
    local w = config.warnings(config.load(path))
    assert.are.equal(3, #w, table.concat(w, "\n"))
    local text = table.concat(w, "\n")
    assert.matches("positive_classes %([^)]*c%.lua:5%) is ignored: task = 'multiclass' %(the default%) wins", text)
    assert.matches("local_steps = 3 %([^)]*c%.lua:3%) is ignored: local_epochs = 2 %([^)]*c%.lua:4%) wins", text)
    assert.matches("churn's leave_rounds = 5 %([^)]*c%.lua:6%) is at or past rounds = 5 %([^)]*c%.lua:2%): rounds "
                   .. "wins", text)
    for _, line in ipairs(w) do assert.is_nil(line:find("\n"), line) end
    -- a default is no setting: none of these warns
    assert.are.same({}, config.warnings(config.load(write_config("nodes = 4\nlocal_epochs = 2\n"))))
    assert.are.same({}, config.warnings(config.load(write_config("task = 'binary'\npositive_classes = { 1 }\n"))))
    assert.are.same({}, config.warnings(config.load(write_config("nodes = 4\nrounds = 6\n"
                                                                 .. "churn = { fraction = 0.5, leave_rounds = 5 }\n"))))
    -- the command line's setting is named as such
    w = config.warnings(config.load(write_config("nodes = 4\nlocal_epochs = 2\n"), { "local_steps=7" }))
    assert.matches("local_steps = 7 %(command line: local_steps=7%) is ignored", w[1])
  end)

  -- a dispatch job's copy lost all but the places: a run directory's record, rerun by dispatch, was
  -- held to the checks of a new config, and the warnings of a new config's keys were not given
  it("config.copy keeps what the config knows of itself: places, keys set, a run directory's record", function()
    local cfg = config.load(write_config("nodes = 4\nlocal_epochs = 2\nlocal_steps = 3\n"))
    local copy = config.copy(cfg)
    assert.are.same(config.warnings(cfg), config.warnings(copy))
    assert.are.equal(1, #config.warnings(copy))
    assert.are.equal(config.where(cfg, "local_steps"), config.where(copy, "local_steps"))
    local dir = tmpdir()
    write_file(dir .. "/config.effective.lua", "nodes = 4\n")
    local effective = config.load(dir .. "/config.effective.lua")
    assert.is_true(config.is_effective(effective))
    assert.is_true(config.is_effective(config.copy(effective)))
  end)

  -- a node reads back the launcher's values (container.config_text) instead of loading the files
  it("reads back, as a node does, every config of configs/ as loaded, with its directories and requires", function()
    local container = require "dpy.container"
    local p = io.popen("find '" .. REPO .. "/configs' -name '*.lua' | sort")
    local checked = 0
    for path in p:lines() do
      local ok, cfg = pcall(config.load, path, { "seed=-7", "fraction=0.1" }, { either_kind = true })
      if ok then   -- scripts (byzantine sweeps, make_data) are no configs
        local back = load("return " .. container.config_text(cfg), "=(config)", "t", {})()
        assert.are.same(cfg, back.values, path)
        assert.are.equal(math.type(cfg.fraction), math.type(back.values.fraction))
        assert.are.same(config.modules(cfg).dirs, back.dirs)
        checked = checked + 1
      end
    end
    p:close()
    assert.is_true(checked >= 15, tostring(checked))
    local dir = tmpdir()
    os.execute("mkdir -p '" .. dir .. "/base' '" .. dir .. "/exp'")
    write_file(dir .. "/base/b.lua", "nodes = 4\nfraction = 0.1 + 0.2\n")
    write_file(dir .. "/exp/mod_for_cfg.lua", "return {}\n")
    write_file(dir .. "/exp/c.lua", 'include "../base/b.lua"\nrequire "mod_for_cfg"\nrequire "mod_for_cfg"\n')
    local cfg = config.load(dir .. "/exp/c.lua")
    local back = load("return " .. container.config_text(cfg), "=(config)", "t", {})()
    assert.are.equal(0.1 + 0.2, back.values.fraction)   -- bit for bit: 0.30000000000000004
    assert.are.same({ dir .. "/exp", dir .. "/base" }, back.dirs)
    assert.are.same({ "mod_for_cfg" }, back.requires)
    assert.are.same(back.dirs, config.modules(config.copy(cfg)).dirs)
  end)
end)
