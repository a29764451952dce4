-- The run directory's graph.json (dpy.layout_files): one padded line per node, so that a node reads the
-- adjacency lists it uses and not the whole graph (at 8192 nodes every node decoding every list
-- was O(n^2) time in all and a MiB of Lua heap a node); still JSON that any reader decodes whole.
local layout = require "dpy.layout"
local files = require "dpy.layout_files"
local graph = require "dpy.graph"
local cjson = require "cjson"
local tensor = require "dpy.tensor"

describe("layout's graph file", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("gives every node's list as the graph has it, reading a list only when it is asked for", function()
    local g = graph.regular(64, 4, 7)
    files.write_graph(dir, g)
    local back = files.load_graph(dir)
    assert.equal(64, back.n)
    assert.is_nil(back.dynamic)
    assert.is_nil(rawget(back.adj, 5))   -- nothing read yet
    for u = 0, 63 do assert.same(g.adj[u], back.adj[u]) end
    assert.is_table(rawget(back.adj, 5))
    assert.is_nil(back.adj[64])
    assert.is_nil(back.adj[-1])
    assert.same(g.adj[3], back.adj[3.0])   -- a uid read as a float
    for _, v in ipairs(back.adj[0]) do assert.equal("integer", math.type(v)) end
  end)

  it("is JSON that decodes whole to the same graph", function()
    local g = graph.ring(5)
    files.write_graph(dir, g, true)
    local t = cjson.decode(read_file(dir .. "/graph.json"))
    assert.equal(5, t.n)
    assert.is_true(t.dynamic)
    assert.same({ { 1, 4 }, { 0, 2 }, { 1, 3 }, { 2, 4 }, { 0, 3 } }, t.adj)
    assert.is_true(files.load_graph(dir).dynamic)
  end)

  it("still reads a compact graph.json (a run directory written before)", function()
    write_file(dir .. "/graph.json", '{"n":3,"adj":[[1],[0,2],[1]]}')
    local back = files.load_graph(dir)
    assert.equal(3, back.n)
    assert.same({ 0, 2 }, back.adj[1])
    assert.same({ 1 }, back.adj[2])
  end)
end)

describe("nodes.core.start's slot ranks", function()
  local nodes_core = require "dpy.nodes.core"
  local function start(ranks)
    return nodes_core.start { nodes = 4, process = 0, processes = 1, node_process = { 0, 0, 0, 0 },
                              uids = { 2 }, ranks = ranks, attach = true, run_id = 1, slots = 1, args = {} }
  end

  it("takes a rank per local node, and its slots then work", function()
    local group, ep = start { 3 }
    assert.is_truthy(group, ep)
    ep:acquire(1)
    ep:release()
    group:close()
  end)

  it("refuses a rank out of range, naming it", function()
    assert.error_matches(function() start { 7 } end, "rank 7 is not in 0 .. 3")
    assert.error_matches(function() start { 0, 1 } end, "'ranks' needs 1 entries")
  end)
end)

describe("layout.check", function()
  -- round_timeout where no round waits by it was ignored; a run directory of then reruns as it ran
  it("refuses what a run would ignore, but reruns a run directory that recorded it", function()
    local config = require "dpy.config"
    local dir = tmpdir()
    for key, why in pairs {
      ["algorithm = 'fedavg'\nround_timeout = 5"] = "/c%.lua:4: round_timeout: .*; fedavg waits by",
      ["fraction = 0.5"] = "/c%.lua:3: fraction: .*; dpsgd samples none",
      -- its server alone evaluated, the nodes asked for none
      ["algorithm = 'fedavg'\neval_nodes = 2"] = "/c%.lua:4: eval_nodes: .*; fedavg's server evaluates",
    } do
      local text = "nodes = 4\ngraph = 'ring'\n" .. key .. "\ntrain_samples = 400\ntest_samples = 100\n"
      write_file(dir .. "/c.lua", text)
      local ok, err = pcall(layout.check, config.load(dir .. "/c.lua"))
      assert.is_false(ok)
      assert.matches(why, err)
      write_file(dir .. "/config.effective.lua", text)
      assert.is_true(config.is_effective(config.load(dir .. "/config.effective.lua")))
      assert.is_truthy(layout.check(config.load(dir .. "/config.effective.lua")).parts)
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  -- each reached the nodes: a class the data lacks failed every node at start-up (exit 1, naming
  -- container.lua), no class or every class trained on one label; a part with no samples failed its
  -- node's loader; a star's hub that is no node raised "attempt to get length of a nil value";
  -- a lognormal slowdown past a float's range ran the simulated clock to inf
  it("refuses binary classes the data lacks, a node without samples, a star without its hub, an infinite slowdown",
     function()
    local config = require "dpy.config"
    local dir = tmpdir()
    local function refusal(text)
      write_file(dir .. "/c.lua", "nodes = 4\ngraph = 'ring'\ntrain_samples = 400\ntest_samples = 100\n" .. text)
      local ok, err = pcall(function() return layout.check(config.load(dir .. "/c.lua")) end)
      assert.is_false(ok, text)
      return err
    end
    assert.matches("/c%.lua:6: positive_classes: binary task: class 10 is not in 0%.%.9$",
                   refusal("task = 'binary'\npositive_classes = { 1, 10 }\n"))
    assert.matches("/c%.lua:6: positive_classes: every class of fashion_mnist %(0%.%.9%) is positive: no sample "
                   .. "would be negative$",
                   refusal("task = 'binary'\npositive_classes = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9 }\n"))
    assert.matches("c.lua:6: config key 'positive_classes' must list one class or more",
                   refusal("task = 'binary'\npositive_classes = {}\n"))
    assert.matches("/c%.lua:7: partition: dirichlet gives node %d+ no training samples %(of 40%)",
                   refusal("nodes = 8\ntrain_samples = 40\npartition = { 'dirichlet', alpha = 0.01, min_size = 0 }\n"))
    assert.matches("/c%.lua:5: graph: star: center 4 is not a node %(0%.%.3%)$",
                   refusal("graph = { 'star', center = 4 }\n"))
    -- named where the graph was set, or, the default graph, the nodes: the line to change
    assert.matches("/c%.lua:5: graph: regular: no 4%-regular graph on 4 nodes %(need degree < nodes",
                   refusal("graph = { 'regular', degree = 4 }\n"))
    write_file(dir .. "/d.lua", "nodes = 3\n")
    local ok, err = pcall(function() return layout.check(config.load(dir .. "/d.lua")) end)
    assert.is_false(ok)
    assert.matches("^d%.lua:1: graph: regular: no 4%-regular graph on 3 nodes", err:gsub("^.*/", ""))
    -- named with the config's file and line, as a slowdown or factors past 1e9 is
    assert.matches("c%.lua:5: stragglers: lognormal = 1000 gives node %d a slowdown of inf",
                   refusal("stragglers = { lognormal = 1000 }\n"))
    -- past 1e9 a node failed at its wait of (slowdown - 1) x its training (host.sleep's limit)
    assert.matches("c%.lua:6: stragglers: lognormal = 100 gives node %d a slowdown of [%d.e+]+ %(a number > 0 and "
                   .. "<= 1e9%)$", refusal("seed = 1\nstragglers = { lognormal = 100 }\n"))
    -- a label_flipping map outside the data's classes failed the poisoned nodes as they started (exit 1)
    assert.matches("/c%.lua:5: actions%[1%]: label_flipping: map%[0%] = 10: the data's classes are 0%.%.9$",
                   refusal("actions = { { 'label_flipping', nodes = { 1 }, map = { [0] = 10 } } }\n"))
    assert.matches("/c%.lua:5: actions%[1%]: label_flipping: map%[x%] = 1: the data's classes are 0%.%.9$",
                   refusal("actions = { { 'label_flipping', nodes = { 1 }, map = { x = 1 } } }\n"))
    -- more nodes evaluated than the run has evaluated them all
    assert.matches("/c%.lua:5: eval_nodes: 5 nodes to evaluate, the run has 4$", refusal("eval_nodes = 5\n"))
    write_file(dir .. "/e.lua", "nodes = 4\ngraph = 'ring'\ntrain_samples = 400\ntest_samples = 100\n")
    local okp, perr = pcall(function() return layout.check(config.load(dir .. "/e.lua", { "processes=5" })) end)
    assert.is_false(okp)
    assert.matches("^command line: processes=5: processes: 5 processes for 4 nodes", perr)
    -- a noise multiplier past the accountant's range hung every node's first epsilon (1e300) or gave NaN
    assert.matches("/c%.lua:5: actions%[1%]: differential_privacy: option 'noise': the noise multiplier must be in "
                   .. "%[1e%-100, 1e100%] %(the accountant's range%), got 1e%+300$",
                   refusal("actions = { { 'differential_privacy', noise = 1e300 } }\n"))
    -- and a binary class given as an integral float is that class
    write_file(dir .. "/c.lua", "nodes = 4\ngraph = 'ring'\ntrain_samples = 400\ntest_samples = 100\n"
                                .. "task = 'binary'\npositive_classes = { 1.0 }\n")
    assert.is_truthy(layout.check(config.load(dir .. "/c.lua")).parts)
    local labels = tensor.new { 0, 1, 2 }:to("int64")
    assert.same({ 0, 1, 0 }, require("dpy.trainer").binary({ 1.0 }, 3).targets(labels):totable())
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("layout's partition file", function()
  it("is one int64 tensor: n + 1 offsets, then every node's indices in uid order (README, Results)", function()
    local dir = tmpdir()
    local parts = { tensor.new({ 4, 7 }, "int64"), tensor.new({ 0, 1, 2 }, "int64"), tensor.new({ 9 }, "int64") }
    layout.write(dir, { parts = parts })
    local p = tensor.load(dir .. "/partition.pt")   -- as torch.load in Python reads it
    assert.equal("int64", p:dtype())
    assert.same({ 0, 2, 5, 6, 4, 7, 0, 1, 2, 9 }, p:totable())
    local n = #parts
    for u = 0, n - 1 do
      local off = p:totable()
      assert.same(parts[u + 1]:totable(), p:narrow(0, n + 1 + off[u + 1], off[u + 2] - off[u + 1]):totable())
      assert.same(parts[u + 1]:totable(), files.load_part(dir, u + 1, n):totable())
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
