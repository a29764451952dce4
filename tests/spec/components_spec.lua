-- Components: one option check for every kind, the user's own components by path (relative to
-- the config), the container locked after init, and outgoing modifiers declared once.
local registry = require "dpy.registry"
local config = require "dpy.config"
local tensor = require "dpy.tensor"
local aggregators = require "dpy.aggregators"
local metrics = require "dpy.metrics"

-- Writes files (name -> text) into a fresh directory; returns it.
local function files(map)
  local dir = tmpdir()
  for name, text in pairs(map) do
    local sub = name:match("^(.*)/[^/]*$")
    if sub then assert(require("dpy.host.core").mkdir_p(dir .. "/" .. sub)) end
    write_file(dir .. "/" .. name, text)
  end
  return dir
end

local function load_error(text, name)
  local dir = files { [name or "c.lua"] = text }
  local ok, err = pcall(config.load, dir .. "/" .. (name or "c.lua"))
  assert.is_false(ok, "the config loaded")
  return err
end

-- a refusal named at the config line that set the key
local AT = "^dpy%-lua: [^\n]*c%.lua:%d+: "

describe("component options", function()
  it("are checked for every kind: an unknown key names the nearest valid one", function()
    local cases = {
      { "sharing = { 'trimmed_mean', F = 2 }", "sharing 'trimmed_mean': unknown option 'F' %(did you mean 'f'%?%)" },
      { "graph = { 'regular', degre = 4 }", "graph 'regular': unknown option 'degre' %(did you mean 'degree'%?%)" },
      { "partition = { 'dirichlet', alpah = 1 }", "partitioner 'dirichlet': unknown option 'alpah'" },
      { "optimizer = { 'sgd', lr = 0.1, momentun = 0.9 }", "unknown option 'momentun' %(did you mean 'momentum'%?%)" },
      { "transforms = { { 'zstd', levle = 3 } }", "transforms%[1%]: transform 'zstd': unknown option 'levle'" },
      { "actions = { { 'label_flipping', fration = 0.2 } }",
        "actions%[1%]: action 'label_flipping': unknown option 'fration'" },
      { "actions = { { 'model_norm', bogus = 1 } }",
        "actions%[1%]: action 'model_norm': unknown option 'bogus'; model_norm takes no options$" },
      { "model = { 'mlp', hiden = { 10 } }", "model 'mlp': unknown option 'hiden' %(did you mean 'hidden'%?%)" },
      { "dataset = { 'mnist', dri = '/x' }", "dataset 'mnist': unknown option 'dri' %(did you mean 'dir'%?%)" },
      { "actions = { { 'byzantine_attack', attack = { 'alie', zz = 1 } } }",
        "action 'byzantine_attack': option 'attack': attack 'alie': unknown option 'zz'" },
      { "sharing = { 'median', f = 1, pre = { { 'nnm', ff = 1 } } }",
        "option 'pre'%[1%]: aggregator 'nnm': unknown option 'ff'" },
    }
    for i, c in ipairs(cases) do
      local err = load_error("nodes = 4\n" .. c[1] .. "\n")
      assert.matches("c.lua:2: .*" .. c[2], err, "case " .. i)
    end
  end)

  it("suggest the name meant, two letters swapped counting as one slip", function()
    assert.matches("c.lua:2: .*'medain' %(did you mean 'median'%?%)", load_error("nodes = 4\nsharing = 'medain'\n"))
    assert.matches("c.lua:2: .*'opitmizer' %(did you mean 'optimizer'%?%)",
                   load_error("nodes = 4\nopitmizer = 'sgd'\n"))
    assert.are.equal("mean", require("dpy.options").nearest("maen", { "mean", "median" }))
  end)

  it("check types and ranges the same way", function()
    local cases = {
      { "sharing = { 'trimmed_mean', f = 1.5 }", "option 'f' must be an integer >= 0, got 1.5" },
      { "sharing = { 'trimmed_mean', f = -1 }", "option 'f' must be an integer >= 0, got %-1" },
      { "sharing = { 'multi_krum', f = 1, m = 0 }", "option 'm' must be an integer >= 1, got 0" },
      { "sharing = { 'trimmed_mean', beta = 0.5 }", "option 'beta' must be a number >= 0 and < 0.5, got 0.5" },
      { "graph = { 'erdos_renyi', p = 2 }", "option 'p' must be a number > 0 and <= 1, got 2" },
      { "optimizer = { 'sgd', lr = -1 }", "option 'lr' must be a number > 0, got %-1" },
      { "transforms = { { 'uniform_asymmetric_quantization', bits = 12 } }",
        "option 'bits' must be 1..8 or 16, got 12" },
      { "actions = { { 'differential_privacy', mode = 'locl' } }",
        [[option 'mode' must be one of "sgd", "local", got "locl" %(did you mean 'local'%?%)]] },
      { "actions = { { 'label_flipping', nodes = { 1, 'x' } } }", "option 'nodes' must be a list of integers" },
      -- an attack on nobody is no attack: the nodes it takes are said, one way
      { "actions = { 'label_flipping' }", "action 'label_flipping': give nodes = { uid, ... } or fraction" },
      { "actions = { { 'byzantine_attack', attack = 'alie' } }",
        "action 'byzantine_attack': give nodes = { uid, ... } or fraction" },
      { "actions = { { 'byzantine_attack', nodes = { 1 }, fraction = 0.5 } }",
        "action 'byzantine_attack': give nodes or fraction, not both" },
    }
    for i, c in ipairs(cases) do
      local err = load_error("nodes = 4\n" .. c[1] .. "\n")
      assert.matches("c.lua:2: .*" .. c[2], err, "case " .. i)
    end
  end)

  -- an infinite lr or attack scale passed every bound (inf > 0), and a list's entries were only typed:
  -- hidden = { 0 } reached torch as "from is out of bounds", a NaN beta failed every node at its start
  it("refuse an infinite number, and a list entry out of the rule's range", function()
    local cases = {
      { "optimizer = { 'sgd', lr = 1 / 0 }", "option 'lr' must be a finite number > 0, got inf" },
      { "optimizer = { 'sgd', momentum = math.huge }", "option 'momentum' must be a finite number >= 0, got inf" },
      { "actions = { { 'differential_privacy', noise = math.huge } }", "option 'noise' must be a finite number > 0" },
      { "actions = { { 'byzantine_attack', fraction = 0.25, attack = { 'sign_flip', scale = 1 / 0 } } }",
        "option 'scale' must be a finite number, got inf" },
      { "model = { 'mlp', hidden = { 200, 0 } }", "option 'hidden' must be a list of integers >= 1, got 0 at %[2%]" },
      -- a std of 0 (or NaN) normalized every pixel to inf or NaN, and the nodes trained on it
      { "dataset = { 'femnist', std = { 0 } }", "option 'std' must be a list of numbers > 0, got 0 at %[1%]" },
      { "dataset = { 'camelyon17', std = { 0.2, 0 / 0, 0.2 } }",
        "option 'std' must be a list of numbers > 0, got %-?nan" },
      { "dataset = { 'image_folder', root = '.', mean = { 'a' } }",
        "option 'mean' must be a list of numbers, got the" },
      { "dataset = { 'image_folder', root = '.', size = { 0, 8 } }", "option 'size' must be a list of integers >= 1" },
      { "optimizer = { 'adam', betas = { 0 / 0, 0.9 } }",
        "option 'betas' must be a list of numbers >= 0 and < 1, got %-?nan at %[1%]" },
    }
    for i, c in ipairs(cases) do
      local err = load_error("nodes = 4\n" .. c[1] .. "\n")
      assert.matches("c.lua:2: .*" .. c[2], err, "case " .. i)
    end
  end)

  -- the config check took them and every node failed in its first round (exit 1): the C rules hold
  -- their counts in an int, and take a center only as a tensor
  it("of the aggregation rules refuse what the rules cannot take: a count past an int, a non-tensor center",
     function()
    local cases = {
      { "sharing = { 'multi_krum', f = 0, m = 1 << 40 }",
        "option 'm' must be at most 2147483647, got 1099511627776" },
      { "sharing = { 'trimmed_mean', f = 0, pre = { { 'bucketing', bucket = 1 << 40 } } }",
        "option 'bucket' must be at most 2147483647" },
      { "sharing = { 'centered_clipping', radius = 1, center = { 1, 2 } }",
        "option 'center' must be a dpy.Tensor %(a d%-vector of finite values%), got a table" },
    }
    for i, c in ipairs(cases) do
      local err = load_error("nodes = 4\n" .. c[1] .. "\n")
      assert.matches("c.lua:2: .*" .. c[2], err, "case " .. i)
    end
    local center = tensor.new { 1, 2 }
    assert.is_nil(config.check("sharing", { "centered_clipping", radius = 1, center = center }))
  end)

  it("are named: a positional value or a non-list where a list belongs is refused", function()
    local cases = {
      { "optimizer = { 'sgd', 0.5 }",
        "optimizer 'sgd': options are named %(key = value%), got 0.5 at position %[2%]" },
      { "actions = { noise = 'x.lua' }", "config key 'actions' must be a list of action entries, got a table" },
      { "sharing = { 'median', f = 1, pre = 'nnm' }", "option 'pre' must be a list of aggregator entries" },
      { "graph = { 'file', path = 'nothere.edges' }",
        "graph 'file': option 'path': no readable file .*/nothere.edges" },
    }
    for i, c in ipairs(cases) do
      local err = load_error("nodes = 4\n" .. c[1] .. "\n")
      assert.matches("c.lua:2: .*" .. c[2], err, "case " .. i)
    end
  end)

  it("are checked in the Lua API too: aggregators refuse F and a fractional f", function()
    local v = { tensor.new { 1, 2 }, tensor.new { 3, 4 }, tensor.new { 5, 6 } }
    assert.error_matches(function() aggregators.trimmed_mean(v, { F = 1 }) end,
                         "aggregators.trimmed_mean: unknown option 'F' %(did you mean 'f'%?%)")
    assert.error_matches(function() aggregators.trimmed_mean(v, { f = 0.5 }) end,
                         "option 'f' must be an integer >= 0, got 0.5")
    assert.error_matches(function() aggregators.multi_krum(v, { f = 0, m = 0 }) end, "option 'm' must be")
  end)

  it("fill their defaults before a component is built", function()
    local t = registry.build("transform", "zstd")
    assert.are.equal("zstd(level=3)", t.label)
  end)
end)

-- A complete set of a user's components, one per kind, in folders beside the config.
local USER = {
  ["models/tiny.lua"] = [[
    local registry = require "dpy.registry"
    local nn = require "dpy.nn"
    return registry.register { kind = "model", name = "tiny",
      options = { hidden = { type = "integer", min = 1, default = 8 } },
      new = function(cfg, ctx)
        return nn.sequential { nn.flatten(), nn.linear(784, cfg.hidden), nn.relu(),
                               nn.linear(cfg.hidden, ctx.dataset.classes) }
      end }
  ]],
  ["data/slice.lua"] = [[
    local registry = require "dpy.registry"
    local data = require "dpy.data"
    local util = require "util"   -- the config's own module, found from its directory
    return registry.register { kind = "dataset", name = "slice",
      options = { dir = { type = "path", required = true } },
      new = function(cfg, ctx) return util.fashion(cfg.dir, ctx.train ~= false) end }
  ]],
  ["util.lua"] = [[
    local data = require "dpy.data"
    return { fashion = function(dir, train) return data.fashion_mnist { dir = dir, train = train } end }
  ]],
  ["rules/half.lua"] = [[
    -- a sharing rule: keep half of the own model, the rest from the neighbours' mean
    local registry = require "dpy.registry"
    return registry.register { kind = "sharing", name = "half",
      new = function()
        return { combine = function(node, _, got)
          local w = {}
          for i = 1, #got do w[i] = 0.5 / #got end
          node.model:mix(#got > 0 and 0.5 or 1, got, w)
        end }
      end }
  ]],
  ["parts/halves.lua"] = [[
    local registry = require "dpy.registry"
    local partition = require "dpy.partition"
    return registry.register { kind = "partitioner", name = "halves",
      new = function(_, ctx) return partition.iid(ctx.labels, ctx.nodes, { seed = 7 }) end }
  ]],
  ["graphs/line.lua"] = [[
    local registry = require "dpy.registry"
    return registry.register { kind = "graph", name = "line",
      new = function(_, ctx)
        local adj = {}
        for u = 0, ctx.nodes - 1 do
          adj[u] = {}
          if u > 0 then adj[u][#adj[u] + 1] = u - 1 end
          if u < ctx.nodes - 1 then adj[u][#adj[u] + 1] = u + 1 end
        end
        return { n = ctx.nodes, adj = adj }
      end }
  ]],
  ["actions/count.lua"] = [[
    local registry = require "dpy.registry"
    return registry.register { kind = "action", name = "count",
      new = function()
        local calls = 0
        return {
          outgoing = function(_, flat, r) calls = calls + 1; return flat end,
          post_exchange = function(node, r) node.metrics:add("modifier_calls", r, calls); calls = 0 end,
        }
      end }
  ]],
}

describe("a user's components", function()
  it("load by path, relative to the config, for every kind, from any directory", function()
    local map = { ["exp/c.lua"] = TINY_RUN .. [[
      model = "models/tiny.lua"
      dataset = { "data/slice.lua", dir = "/usr/share/datasets/fashion-mnist" }
      sharing = "rules/half.lua"
      partition = "parts/halves.lua"
      graph = "graphs/line.lua"
      actions = { "actions/count.lua" }
    ]] }
    for name, text in pairs(USER) do map["exp/" .. name] = text end
    local dir = files(map)
    local code, _, err = sh("cd / && " .. shell_quote(DPY_BIN) .. " run " .. dir .. "/exp/c.lua --out " .. dir
                            .. "/out -q")
    assert.are.equal(0, code, err)
    local m = node_metrics(dir .. "/out", 1)
    -- a line: node 1 sends to 2 neighbours in one send, its modifier runs once a round
    assert.are.same({ { 1, 1 }, { 2, 1 }, { 3, 1 } }, m.modifier_calls)
    assert.matches('"n":4', read_file(dir .. "/out/graph.json"))
    local written = require("cjson").decode(read_file(dir .. "/out/graph.json"))
    assert.are.same({ { 1 }, { 0, 2 }, { 1, 3 }, { 2 } }, written.adj)
    -- the tiny model: 784 x 8 + 8 + 8 x 10 + 10 values
    assert.are.equal(2 * (6370 * 4 + 40), m.bytes_sent[1][2])
  end)

  it("registered by a module the config requires reach the nodes, and an included config's modules are found",
     function()
    -- the nodes read back the launcher's values: they require what the config's files required
    -- (here reg, which registers a model by name) and search the included config's directory
    local dir = files {
      ["exp/c.lua"] = 'include "../base/b.lua"\nrequire "reg"\nmodel = "tiny_by_name"\n',
      ["exp/reg.lua"] = (USER["models/tiny.lua"]:gsub('name = "tiny"', 'name = "tiny_by_name"')),
      ["base/b.lua"] = TINY_RUN .. 'dataset = { "data/slice.lua", dir = "/usr/share/datasets/fashion-mnist" }\n',
      ["base/data/slice.lua"] = USER["data/slice.lua"],
      ["base/util.lua"] = USER["util.lua"],
    }
    for _, p in ipairs { 1, 2 } do
      local code, _, err = sh("cd / && " .. shell_quote(DPY_BIN) .. " run " .. dir .. "/exp/c.lua --out " .. dir
                              .. "/out" .. p .. " -q processes=" .. p)
      assert.are.equal(0, code, err)
      -- the tiny model's bytes: 784 x 8 + 8 + 8 x 10 + 10 values to each of 2 neighbours
      assert.are.equal(2 * (6370 * 4 + 40), node_metrics(dir .. "/out" .. p, 1).bytes_sent[1][2])
    end
  end)

  it("are validated at config load, with the config's file and line", function()
    local err = load_error("nodes = 4\nmodel = 'models/nothere.lua'\n")
    assert.matches("c.lua:2: model: cannot read model file .*/models/nothere.lua", err)
    local dir = files { ["m.lua"] = "return 42\n", ["c.lua"] = "model = 'm.lua'\n" }
    local ok, e = pcall(config.load, dir .. "/c.lua")
    assert.is_false(ok)
    assert.matches("c.lua:1: model: .*/m.lua: a model file must register one spec of kind 'model'", e)
    assert.matches("it registered none", e)
    -- a file of another kind says which
    dir = files { ["a.lua"] = "return require('dpy.registry').register { kind = 'aggregator', name = 'clip', "
                              .. "new = function() return function(x) return x end end }\n",
                  ["c.lua"] = "nodes = 4\nsharing = 'a.lua'\n" }
    ok, e = pcall(config.load, dir .. "/c.lua")
    assert.is_false(ok)
    assert.matches("must register one spec of kind 'sharing' .* it registered none of that kind, but "
                   .. "aggregator 'clip'", e)
    dir = files { ["m.lua"] = USER["models/tiny.lua"], ["c.lua"] = "model = { 'm.lua', hiden = 3 }\n" }
    ok, e = pcall(config.load, dir .. "/c.lua")
    assert.is_false(ok)
    assert.matches("c.lua:1: model: model 'tiny': unknown option 'hiden' %(did you mean 'hidden'%?%)", e)
  end)

  it("run in the Byzantine simulation: an aggregator, a pre-aggregation and an attack by path", function()
    local dir = files {
      ["first.lua"] = [[
        local registry = require "dpy.registry"
        return registry.register { kind = "aggregator", name = "first",
          new = function() return function(x) return x[0]:clone() end end }]],
      ["double.lua"] = [[
        local registry = require "dpy.registry"
        return registry.register { kind = "aggregator", name = "double", pre = true,
          new = function() return function(x) return x * 2 end end }]],
      ["zeros.lua"] = [[
        local registry = require "dpy.registry"
        local tensor = require "dpy.tensor"
        return registry.register { kind = "attack", name = "zeros",
          new = function() return function(honest, _, f) return tensor.zeros(f, honest:size(1)) end end }]],
    }
    local data = require "dpy.data"
    local sim = require("dpy.byzantine").simulation {
      model = { "mlp", hidden = { 4 } }, train_set = data.fashion_mnist {}, n = 4, f = 1, batch_size = 8,
      attack = dir .. "/zeros.lua", aggregator = dir .. "/first.lua", pre_aggregation = { dir .. "/double.lua" },
    }
    local snap = sim:step()
    assert.are.equal(0, snap.byzantine_parameters:abs():sum():item())
    -- each honest worker's model is twice the first model it gathered (its own, then the others)
    local local_params = snap.local_parameters
    assert.is_true(snap.parameters[0]:allclose(local_params[0] * 2))
  end)

  it("are one kind each: a file loaded as a model is refused as a sharing rule", function()
    local dir = files { ["m.lua"] = USER["models/tiny.lua"], ["c.lua"] = "model = 'm.lua'\nsharing = 'm.lua'\n" }
    local ok, e = pcall(config.load, dir .. "/c.lua")
    assert.is_false(ok)
    assert.matches("c.lua:2: sharing: .*/m.lua registers a model %('tiny'%), not a sharing", e)
  end)

  it("name a model or dataset whose new returns what the run cannot use, and what is wrong", function()
    local dir = files {
      ["m.lua"] = [[return require("dpy.registry").register { kind = "model", name = "flat",
                                                            new = function() return { 1, 2 } end }]],
      ["d.lua"] = [[
        local tensor = require "dpy.tensor"
        return require("dpy.registry").register { kind = "dataset", name = "odd",
          options = { labels = { type = "integer", default = 10 }, dtype = { type = "string", default = "int64" },
                      top = { type = "integer", default = 1 }, drop = { type = "string" }, flat = { type = "boolean" },
                      shape = { type = "list" }, mean = { type = "list" }, std = { type = "list" } },
          new = function(cfg)
            local labels = tensor.zeros(cfg.labels):to(cfg.dtype)
            labels[1] = cfg.top
            local d = { images = tensor.zeros(10, 1, 2, 2):to("uint8"), labels = labels, classes = 2,
                        mean = cfg.mean or { 0.5 }, std = cfg.std or { 0.5 }, shape = cfg.shape or { 1, 2, 2 } }
            if cfg.flat then d.images = tensor.zeros(10, 2, 2):to("uint8") end   -- no channel dimension
            if cfg.drop then d[cfg.drop] = nil end
            return d
          end }]] }
    local ok, e = pcall(registry.build, "model", dir .. "/m.lua")
    assert.is_false(ok)
    assert.are.equal("model 'flat' (" .. dir .. "/m.lua): new must return a dpy.Module, got table", e)
    for _, case in ipairs { { 12, "int64", 1, "returned 12 labels for 10 images" },
                            { 10, "float32", 1, "returned labels of float32, not of an integer type" },
                            { 10, "uint8", 5, "returned labels from 0 to 5 for 2 classes (0 to 1)" } } do
      ok, e = pcall(registry.build, "dataset", { dir .. "/d.lua", labels = case[1], dtype = case[2], top = case[3] })
      assert.is_false(ok)
      assert.are.equal("dataset 'odd' (" .. dir .. "/d.lua): new " .. case[4], e)
    end
    for _, dtype in ipairs { "int64", "int32", "uint8" } do
      assert.truthy(registry.build("dataset", { dir .. "/d.lua", labels = 10, dtype = dtype, top = 1 }).images)
    end
    -- what the loader and the models read: shape, mean and std per channel, images N×C×H×W
    for _, case in ipairs {
      { { drop = "shape" },
        "returned no shape, a list {C, H, W} of one image's dimensions (what a model is built for)" },
      { { shape = { 3, 2, 2 } }, "returned shape {3, 2, 2}, but its images are 1×2×2" },
      { { shape = { 1, 4 } }, "returned shape {1, 4}, but its images are 1×2×2" },
      { { flat = true }, "returned images of 10×2×2, not N×C×H×W (a grey image has C = 1)" },
      { { drop = "mean" }, "returned no mean, a list of 1 number (one per channel) that the loader normalizes with" },
      { { mean = { 0.5, 0.5 } }, "returned mean of 2 numbers for images of 1 channel" },
      { { std = { 0 } }, "returned std[1] = 0, not a number > 0" },
      -- uint8 pixels are scaled to [0, 1] before normalizing: statistics on the 0..255 scale
      { { mean = { 125.3 } }, "returned mean for uint8 images, which must be on the [0, 1] scale that uint8 "
                              .. "pixels are normalized on, got 125.3 at [1] (125.3 / 255 = 0.4914)" },
      { { std = { 63 } }, "returned std for uint8 images, which must be on the [0, 1] scale that uint8 pixels "
                          .. "are normalized on, got 63 at [1] (63 / 255 = 0.2471)" },
      { { drop = "std" }, "returned no std, a list of 1 number (one per channel) that the loader normalizes with" },
    } do
      case[1][1] = dir .. "/d.lua"
      ok, e = pcall(registry.build, "dataset", case[1])
      assert.is_false(ok)
      assert.are.equal("dataset 'odd' (" .. dir .. "/d.lua): new " .. case[2], e)
    end
    -- named as the dataset's, before the run starts: the model-fit check blamed the model for it
    local code, _, err, out = run_config(TINY_RUN .. "dataset = { '" .. dir .. "/d.lua', drop = 'shape' }\n", "-q")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: dataset 'odd' %(.*/d%.lua%): new returned no shape", err)
    assert.are.equal(1, (sh("test -e " .. shell_quote(out))))
  end)

  -- A graph file of new = function(_, ctx) <body> end over ctx.nodes, as a user's graph component.
  local function graph_file(body)
    local text = 'return require("dpy.registry").register { kind = "graph", name = "mine",\n'
                 .. "  new = function(_, ctx) local n, adj = ctx.nodes, {}\n" .. body .. "\n"
                 .. "    return { n = n, adj = adj } end }\n"
    return files { ["g.lua"] = text } .. "/g.lua"
  end

  -- Runs TINY_RUN with extra config lines; the run must be refused before it starts: returns its stderr.
  local function refused(extra)
    local code, _, err, out = run_config(TINY_RUN .. extra, "-q")
    assert.are.equal(2, code, err)
    -- a config-level message (named at the config's line, c.lua:N), not a Lua location
    assert.not_matches("%.lua:%d+:", (err:gsub("^(dpy%-lua: )[^\n ]*/c%.lua:%d+: ", "%1")))
    assert.is_nil(read_file(out .. "/manifest.json"), out .. " was written")
    assert.are.equal(1, (sh("test -e " .. shell_quote(out))))
    return err
  end

  it("name a graph that is not undirected and simple, refused before the run starts", function()
    local cases = {
      { "for u = 0, n - 1 do adj[u] = { (u + 1) % n } end",   -- a directed cycle
        "returned a directed graph: node 0 lists 1 as a neighbour, but 1 does not list 0" },
      { "for u = 0, n - 1 do adj[u] = { (u + 1) % n, (u - 1) % n, u } end",
        "returned a graph whose node 0 lists itself %(a self%-loop%)" },
      { "for u = 0, n - 1 do adj[u] = { (u + 1) % n, (u - 1) % n, (u + 1) % n } end",
        "returned a graph whose node 0 lists 1 twice" },
      { "for u = 0, n - 1 do adj[u] = { (u + 1) % n, (u - 1) % n, n } end",
        "returned a graph whose node 0 lists 4, not a node %(an integer 0%.%.3%)" },
      { "for u = 0, n - 2 do adj[u] = {} end", "returned no neighbour list for node 3" },
      { "for u = 0, n - 1 do adj[u] = {} end n = n + 1", "returned a graph of n = 5 for 4 nodes" },
    }
    for i, case in ipairs(cases) do
      local path = graph_file(case[1])
      local ok, e = pcall(registry.build, "graph", path, { nodes = 4, seed = 1, round = 1 })
      assert.is_false(ok, "case " .. i)
      assert.matches("^graph 'mine' %(" .. path:gsub("%p", "%%%0") .. "%): new " .. case[2], e, "case " .. i)
    end
    local err = refused("graph = '" .. graph_file(cases[1][1]) .. "'\n")
    assert.matches(AT .. "graph 'mine' %(.*/g%.lua%): new returned a directed graph: node 0 lists 1 as a "
                   .. "neighbour, but 1 does not list 0", err)
    -- two rings apart: named with its file and a node that cannot reach node 0
    err = refused("graph = '" .. graph_file("for u = 0, n - 1 do adj[u] = { u ~ 1 } end") .. "'\n")
    assert.matches(AT .. "graph: the graph is not connected %(.*/g%.lua%): node 2 cannot reach node 0", err)
    -- uids as floats of integer values (a JSON decoder's, a division's) are uids
    local ring = graph_file("for u = 0, n - 1 do adj[u] = { (u + 1) % n + 0.0, (u - 1) % n / 1 } end")
    assert.truthy(registry.build("graph", ring, { nodes = 4, seed = 1, round = 1 }))
    local path = graph_file("for u = 0, n - 1 do adj[u] = { (u + 1) % n + 0.5 } end")
    assert.error_matches(function() registry.build("graph", path, { nodes = 4, seed = 1, round = 1 }) end,
                         "node 0 lists 1%.5, not a node")
  end)

  it("take a directed graph where the sharing rule says it can use one, refuse it naming the rule where not", function()
    -- push gossip: a node sends to the nodes its list names and averages what came from those that
    -- name it (graph.incoming), 1/(k + 1) each
    local rule = files { ["push.lua"] = [[
      local registry = require "dpy.registry"
      local graph = require "dpy.graph"
      local exchange = require "dpy.exchange"
      return registry.register { kind = "sharing", name = "push", exchange = true, directed = true,
        new = function() return { exchange = function(node, r, g, peers)
          local flat = exchange.model_flat(node)
          if #peers > 0 then exchange.send_model(node, peers, r, flat) end
          flat:free()
          node.endpoint:release()
          local got, deadline = {}, exchange.deadline(node)
          for _, v in ipairs(graph.incoming(g, node.uid)) do
            got[#got + 1] = assert(exchange.receive(node, v, r, deadline))
          end
          node.endpoint:acquire(r + 1)
          local w = {}
          for i = 1, #got do w[i] = 1 / (#got + 1) end
          node.model:mix(1 / (#got + 1), got, w)   -- copies on write: local receivers may still read it
          for _, x in ipairs(got) do x:free() end
          node.metrics:add("pushes_received", r, #got)
        end } end }]] } .. "/push.lua"
    local ring = graph_file("for u = 0, n - 1 do adj[u] = { (u + 1) % n } end")   -- a directed cycle
    local code, _, err, out = run_config(TINY_RUN .. "graph = '" .. ring .. "'\nsharing = '" .. rule .. "'\n", "-q")
    assert.are.equal(0, code, err)
    local m = metrics.read(out .. "/1.metrics.json")
    assert.are.same({ { 1, 1 }, { 2, 1 }, { 3, 1 } }, m.metrics.pushes_received)
    -- the same graph under the built-in averaging: refused, naming the rule and why
    err = refused("graph = '" .. ring .. "'\n")
    assert.matches(AT .. "graph 'mine' %(.*/g%.lua%): new returned a directed graph: node 0 lists 1 as a "
                   .. "neighbour, but 1 does not list 0, which sharing 'average' cannot use: its "
                   .. "Metropolis%-Hastings average needs every link both ways", err)
    err = refused("graph = '" .. ring .. "'\nsharing = 'secure_average'\n")
    assert.matches("which sharing 'secure_average' cannot use", err)
    err = refused("graph = '" .. ring .. "'\nalgorithm = 'async'\n")
    assert.matches("which algorithm 'async' cannot use", err)
    -- a graph file read as arcs (file's directed = true): taken by the push rule, refused by the averaging
    local arcs = files { ["ring.edges"] = "4\n0 1\n1 2\n2 3\n3 0\n" } .. "/ring.edges"
    local file_graph = "graph = { 'file', path = '" .. arcs .. "', directed = true }\n"
    code, _, err, out = run_config(TINY_RUN .. file_graph .. "sharing = '" .. rule .. "'\n", "-q")
    assert.are.equal(0, code, err)
    assert.are.same({ { 1, 1 }, { 2, 1 }, { 3, 1 } }, metrics.read(out .. "/2.metrics.json").metrics.pushes_received)
    err = refused(file_graph)
    assert.matches(AT .. "graph file .*/ring%.edges %(directed = true%): node 0 sends to 1, but 1 not "
                   .. "to 0, which sharing 'average' cannot use", err)
    -- without directed = true the same file is DecentralizePy's undirected ring
    assert.are.same({ 1, 3 }, registry.build("graph", { "file", path = arcs }, { nodes = 4 }).adj[0])
    -- directed = true without an exchange of its own is no rule the averaging can run
    local bad = files { ["bad.lua"] = [[
      return require("dpy.registry").register { kind = "sharing", name = "bad", directed = true,
        new = function() return { combine = function() end } end }]] } .. "/bad.lua"
    err = refused("sharing = '" .. bad .. "'\n")
    assert.matches("sharing 'bad' %(.*/bad%.lua%): says directed = true without exchange = true", err)
  end)

  it("name a partitioner whose parts do not fit the nodes or the training set, before the run starts", function()
    local dir = files { ["p.lua"] = [[
      local tensor = require "dpy.tensor"
      return require("dpy.registry").register { kind = "partitioner", name = "mine",
        options = { parts = { type = "integer" }, top = { type = "integer" }, dtype = { type = "string" },
                    plain = { type = "boolean" } },
        new = function(cfg, ctx)
          local parts = {}
          for k = 1, cfg.parts or ctx.nodes do
            parts[k] = cfg.plain and { 0, 1 } or tensor.new({ 0, k }, cfg.dtype or "int64")
          end
          if cfg.top then parts[#parts] = tensor.new({ 0, cfg.top }, "int64") end
          return parts
        end }]] }
    local path = dir .. "/p.lua"
    local labels = tensor.zeros(10):to("int64")
    for i, case in ipairs {
      { { parts = 2 }, "returned 2 parts for 4 training nodes" },
      { { top = 10 }, "returned part 4 that holds index 10, outside the training set's 10 samples %(0%.%.9%)" },
      { { top = -1 }, "returned part 4 that holds index %-1, outside the training set's 10 samples %(0%.%.9%)" },
      { { dtype = "float32" }, "returned part 1 that is a tensor of float32, not of an integer type" },
      { { plain = true }, "returned part 1 that is a table, not a tensor of sample indices" },
    } do
      local entry = { path }
      for k, v in pairs(case[1]) do entry[k] = v end
      local ok, e = pcall(registry.build, "partitioner", entry, { labels = labels, nodes = 4, seed = 1 })
      assert.is_false(ok, "case " .. i)
      assert.matches("^partitioner 'mine' %(" .. path:gsub("%p", "%%%0") .. "%): new " .. case[2], e, "case " .. i)
    end
    assert.are.equal(4, #registry.build("partitioner", path, { labels = labels, nodes = 4, seed = 1 }))
    local err = refused("partition = { '" .. path .. "', parts = 2 }\n")
    assert.matches(AT .. "partitioner 'mine' %(.*/p%.lua%): new returned 2 parts for 4 training nodes", err)
    err = refused("partition = { '" .. path .. "', top = 2000 }\n")   -- TINY_RUN's train_samples
    assert.matches("holds index 2000, outside the training set's 2000 samples %(0%.%.1999%)", err)
  end)

  it("name a sharing rule without the methods the run calls: the rule, its file and the method", function()
    local dir = files { ["s.lua"] = [[
      return require("dpy.registry").register { kind = "sharing", name = "mine",
        options = { drop = { type = "string" }, wrong = { type = "string" } },
        new = function(cfg)
          local f = function() end
          local rule = { combine = f, payload = "uint8", bound = f, encode = f, decode = f, checkpoint = f,
                         restore = f }
          if cfg.drop then rule[cfg.drop] = nil end
          if cfg.wrong then rule[cfg.wrong] = 42 end
          return rule
        end }]] }
    local path = dir .. "/s.lua"
    for i, case in ipairs {
      { { drop = "combine" }, "returned no combine %(a function%(node, round, got, weights, own_weight%)%)" },
      { { wrong = "combine" }, "returned combine, a number, not a function" },
      { { drop = "decode" }, "returned a payload of its own without decode %(a function%)" },
      { { drop = "bound" }, "returned a payload of its own without bound %(a function%)" },
      { { wrong = "restore" }, "returned restore, a number, not a function" },
    } do
      local entry = { path }
      for k, v in pairs(case[1]) do entry[k] = v end
      local ok, e = pcall(registry.build, "sharing", entry, {})
      assert.is_false(ok, "case " .. i)
      assert.matches("^sharing 'mine' %(" .. path:gsub("%p", "%%%0") .. "%): new " .. case[2], e, "case " .. i)
    end
    assert.truthy(registry.build("sharing", path, {}).combine)
    -- built by every node: each fails at start-up, naming the rule, its file and the method
    local code, _, err = run_config(TINY_RUN .. "sharing = { '" .. path .. "', drop = 'combine' }\n", "-q")
    assert.are.equal(1, code, err)
    assert.matches("nodes 0%-3 failed: sharing 'mine' %(.*/s%.lua%): new returned no combine", err)
    assert.not_matches("attempt to call", err)
  end)

  -- Builds kind from path with case's options; returns the error, which must name the component and its file.
  local function refused_build(kind, path, case, ctx)
    local entry = { path }
    for k, v in pairs(case) do entry[k] = v end
    local ok, e = pcall(registry.build, kind, entry, ctx or {})
    assert.is_false(ok, kind .. " built")
    assert.matches("^" .. kind .. " 'mine' %(" .. path:gsub("%p", "%%%0") .. "%): new ", e)
    return e:match("%): new (.*)$")
  end

  it("name an optimizer without the methods the run calls: the optimizer, its file and the method", function()
    local dir = files { ["o.lua"] = [[
      local optim = require "dpy.optim"
      return require("dpy.registry").register { kind = "optimizer", name = "mine",
        options = { give = { type = "string" } },
        new = function(cfg, ctx)
          local f = function() end
          local given = { empty = {}, number = 42, step = { zero_grad = f, step = 1 },
                          table = { zero_grad = f, step = f } }
          return given[cfg.give] or optim.sgd(ctx.model, { lr = 0.1 })
        end }]] }
    local path = dir .. "/o.lua"
    local model = require("dpy.nn").linear(2, 2)
    for i, case in ipairs {
      { { give = "empty" }, "returned an optimizer without zero_grad %(a function%(self%)%)" },
      { { give = "number" }, "must return a dpy%.Optimizer %(optim%.sgd%(ctx%.model, cfg%)%) or a table of its "
                             .. "methods, got number" },
      { { give = "step" }, "returned an optimizer whose step is a number, not a function" },
      { { give = "table" }, "returned an optimizer without state %(a function%(self%) %-> bytes%), which "
                            .. "checkpoint_every needs", { checkpoint_every = 1 } },
      { { give = "table" }, "returned an optimizer without reset %(a function%(self%)%), which reset_optimizer "
                            .. "needs", { reset_optimizer = true } },
    } do
      local wrong = refused_build("optimizer", path, case[1], { model = model, config = case[3] or {} })
      assert.matches("^" .. case[2], wrong, "case " .. i)
    end
    assert.truthy(registry.build("optimizer", { path, give = "table" }, { model = model, config = {} }).step)
    local opt = registry.build("optimizer", path, { model = model, config = { checkpoint_every = 1,
                                                                                reset_optimizer = true } })
    assert.are.equal("userdata", type(opt))   -- a dpy.Optimizer keeps every contract
    -- built by every node: each fails at start-up, naming the optimizer, its file and the method
    local code, _, err = run_config(TINY_RUN .. "optimizer = { '" .. path .. "', give = 'empty' }\n", "-q")
    assert.are.equal(1, code, err)
    assert.matches("nodes 0%-3 failed: optimizer 'mine' %(.*/o%.lua%): new returned an optimizer without "
                   .. "zero_grad", err)
    assert.not_matches("attempt to call", err)
  end)

  -- An algorithm file: new returns what option give names (42), else a round of dpsgd's returning option loss
  -- ("string": "high") and option secs ("none": nil) instead of its own.
  local ALGORITHM = [[
    return require("dpy.registry").register { kind = "algorithm", name = "mine", graph = true,
      options = { give = { type = "string" }, loss = { type = "string" }, secs = { type = "string" } },
      new = function(cfg, node)
        if cfg.give then return 42 end
        local round = require("dpy.algorithms.dpsgd").new({}, node)
        return function(n, r)
          local loss, secs = round(n, r)
          if cfg.loss == "string" then loss = "high" end
          if cfg.secs == "none" then secs = nil end
          return loss, secs
        end
      end }]]

  it("name an algorithm whose new returns no round function: the algorithm, its file and what it got", function()
    local path = files { ["a.lua"] = ALGORITHM } .. "/a.lua"
    local wrong = refused_build("algorithm", path, { give = "number" })
    assert.are.equal("must return a function(node, round) -> train_loss or nil, train_seconds; got number", wrong)
    local code, _, err = run_config(TINY_RUN .. "algorithm = { '" .. path .. "', give = 'number' }\n", "-q")
    assert.are.equal(1, code, err)
    assert.matches("nodes 0%-3 failed: algorithm 'mine' %(.*/a%.lua%): new must return a function%(node, round%)", err)
    assert.not_matches("attempt to call", err)
  end)

  it("name an algorithm whose round returns a loss or seconds that are not numbers, and record none", function()
    local path = files { ["a.lua"] = ALGORITHM } .. "/a.lua"
    for _, case in ipairs {
      { "loss = 'string'", "round 1 returned train_loss \"high\" %(a string%), not a number or nil" },
      { "secs = 'none'", "round 1 returned train_seconds nil, not a number" },
    } do
      local code, _, err, out = run_config(TINY_RUN .. "algorithm = { '" .. path .. "', " .. case[1] .. " }\n", "-q")
      assert.are.equal(1, code, err)
      assert.matches("nodes 0%-3 failed: algorithm 'mine' %(.*/a%.lua%): " .. case[2], err)
      assert.not_matches("diverged", err)
      assert.is_nil(node_metrics(out, 0).train_loss)
    end
    local code, _, err, out = run_config(TINY_RUN .. "algorithm = '" .. path .. "'\n", "-q")   -- its own loss
    assert.are.equal(0, code, err)
    assert.are.equal(3, #node_metrics(out, 0).train_loss)
  end)

  it("name a transform without encode or decode, or of another shape: the transform, its file and the field", function()
    local dir = files { ["t.lua"] = [[
      return require("dpy.registry").register { kind = "transform", name = "mine",
        options = { drop = { type = "string" }, wrong = { type = "string" } },
        new = function(cfg)
          local f = function() end
          local t = { label = "mine", input = "any", encode = f, decode = f, bound = f }
          if cfg.drop then t[cfg.drop] = nil end
          if cfg.wrong then t[cfg.wrong] = 42 end
          return cfg.drop == "all" and "oops" or t
        end }]] }
    local path = dir .. "/t.lua"
    for i, case in ipairs {
      { { drop = "all" }, "must return a table { label, input, encode, decode, bound }, got string" },
      { { drop = "encode" }, "returned no encode %(a function%(t%) %-> uint8 tensor%)" },
      { { drop = "decode" }, "returned no decode %(a function%(payload, dtype, max_bytes%) %-> tensor or nil, err%)" },
      { { wrong = "bound" }, "returned bound, a number, not a function" },
      { { drop = "label" }, "returned no label %(a string naming it and its options%)" },
      { { wrong = "input" }, "returned input 42, not \"float32\" or \"any\"" },
    } do
      local wrong = refused_build("transform", path, case[1])
      assert.matches("^" .. case[2], wrong, "case " .. i)
    end
    assert.truthy(registry.build("transform", { path, drop = "bound" }).encode)
    assert.truthy(registry.build("transform", { path, drop = "input" }).encode)
    local code, _, err = run_config(TINY_RUN .. "transforms = { { '" .. path .. "', drop = 'encode' } }\n", "-q")
    assert.are.equal(2, code, err)   -- the config check builds the chain, for the payload limit
    assert.matches("c%.lua:%d+: transforms%[1%] %(mine%): transform 'mine' %(.*/t%.lua%): new returned no encode", err)
    assert.not_matches("attempt to call", err)
  end)

  it("take a built-in the file asks for at its top as the built-in's, not as a second spec of the file", function()
    local dir = files { ["z1.lua"] = [[
      local registry = require "dpy.registry"
      local zstd = registry.build("transform", { "zstd", level = 1 })   -- loads the built-in's file now
      return registry.register { kind = "transform", name = "zstd1",
        new = function() return { label = "zstd1", input = "any", encode = zstd.encode, decode = zstd.decode,
                                  bound = zstd.bound } end }]] }
    local code, _, err, out = run_config(TINY_RUN .. "transforms = { '" .. dir .. "/z1.lua' }\n", "-q")
    assert.are.equal(0, code, err)
    assert.are.equal(3, #node_metrics(out, 1).test_accuracy)
  end)

  it("name an action whose new returns neither nil nor a table of handlers: the action, its file, what", function()
    local dir = files { ["a.lua"] = [[
      return require("dpy.registry").register { kind = "action", name = "mine",
        options = { give = { type = "string" } },
        new = function(cfg)
          local given = { string = "oops", handler = { post_train = 1 }, outgoing = { outgoing = true } }
          return given[cfg.give]
        end }]] }
    local path = dir .. "/a.lua"
    for i, case in ipairs {
      { { give = "string" }, "must return nil or a table of handlers %({ %[event%] = function%(node, round%) }%), "
                             .. "got string" },
      { { give = "handler" }, "returned post_train, a number, not a function" },
      { { give = "outgoing" }, "returned outgoing, a boolean, not a function" },
    } do
      local wrong = refused_build("action", path, case[1])
      assert.matches("^" .. case[2], wrong, "case " .. i)
    end
    assert.is_nil(registry.build("action", path, {}))
    local code, _, err = run_config(TINY_RUN .. "actions = { { '" .. path .. "', give = 'string' } }\n", "-q")
    assert.are.equal(1, code, err)
    assert.matches("nodes 0%-3 failed: action 'mine' %(.*/a%.lua%): new must return nil or a table of handlers", err)
  end)

  it("take a user's pre-aggregation in a sharing rule's pre, and run beta and pre rules", function()
    local dir = files { ["clip.lua"] = [[
      local registry = require "dpy.registry"
      return registry.register { kind = "aggregator", name = "clip", pre = true,
        new = function() return function(x) return x:clamp(-1, 1) end end }]] }
    local code, _, err, out = run_config(TINY_RUN .. "sharing = { 'median', beta = 0.2, pre = { 'nnm', '"
                                         .. dir .. "/clip.lua' } }\n")
    assert.are.equal(0, code, err)
    assert.are.equal(3, #node_metrics(out, 0).test_accuracy)
    -- a rule named by its name alone, as any component can be: in the config and as an override
    for _, how in ipairs { { "sharing = 'median'\n", "" }, { "", "sharing=krum" } } do
      code, _, err, out = run_config(TINY_RUN .. how[1], how[2])
      assert.are.equal(0, code, err)
      assert.are.equal(3, #node_metrics(out, 0).test_accuracy)
    end
  end)

  it("resolve path options against the config's directory", function()
    local dir = files { ["c.lua"] = "nodes = 2\ngraph = { 'file', path = 'g.edges' }\n", ["g.edges"] = "2\n0 1\n" }
    local cfg = config.load(dir .. "/c.lua")
    assert.are.equal(dir .. "/g.edges", cfg.graph.path)
  end)
end)

describe("the nodes that evaluate (eval_nodes)", function()
  local container = require "dpy.container"
  local function evaluators(cfg)
    local got = {}
    for u = 0, cfg.nodes - 1 do if container.evaluates(cfg, u) then got[#got + 1] = u end end
    return got
  end

  it("are a seeded sample, the same on every node (Fisher-Yates with splitmix64, computed in Python)", function()
    assert.are.same({ 3, 9, 11, 13, 15 }, evaluators { nodes = 16, eval_nodes = 5, seed = 7, algorithm = "dpsgd" })
    assert.are.same({ 75, 294, 553 }, evaluators { nodes = 1000, eval_nodes = 3, seed = -12, algorithm = "dpsgd" })
    assert.are.same({ 0, 1, 2, 3 }, evaluators { nodes = 4, eval_nodes = 4, seed = 1, algorithm = "dpsgd" })
    assert.are.same({ 0 }, evaluators { nodes = 4, eval_nodes = 2, seed = 1, algorithm = "fedavg" })
  end)

  it("are drawn once per process: a node's question costs nothing of the node count", function()
    -- every node asks at its build: a draw of its own was O(nodes) a node, O(nodes^2) a run (8,192
    -- nodes: 1.3 ms a node, and a table of every node each)
    local cfg = { nodes = 1000000, eval_nodes = 10, seed = 3, algorithm = "dpsgd" }
    container.evaluates(cfg, 0)
    collectgarbage("stop")
    local before = collectgarbage("count")
    for u = 1, 50 do container.evaluates(cfg, u) end
    local kib = collectgarbage("count") - before
    collectgarbage("restart")
    assert.is_true(kib < 64, string.format("50 nodes' questions took %.0f KiB at a million nodes", kib))
  end)
end)

describe("the container #e2e", function()
  local function action(body)
    local dir = files { ["a.lua"] = [[
      local registry = require "dpy.registry"
      return registry.register { kind = "action", name = "a", new = function(_, node) ]] .. body .. [[ end }
    ]] }
    return "actions = { '" .. dir .. "/a.lua' }\n"
  end

  it("refuses to replace a component after init, naming it", function()
    local code, _, err = run_config(TINY_RUN .. action(
      "return { post_train = function(n) n.sharing = { combine = function() end } end }"))
    assert.are.equal(1, code)
    assert.matches("node %d: 'sharing' is a component of the node's container, locked after init", err)
  end)

  it("lets an action wrap a component while it is built", function()
    local code, _, err, out = run_config(TINY_RUN .. action([[
      local calls = 0
      node:wrap("sharing", function(s)
        return { combine = function(...) calls = calls + 1; return s.combine(...) end }
      end)
      return { post_exchange = function(n, r) n.metrics:add("combines", r, calls) end }]]))
    assert.are.equal(0, code, err)
    assert.are.same({ { 1, 1 }, { 2, 2 }, { 3, 3 } }, node_metrics(out, 0).combines)
  end)

  it("re-points what was built from a wrapped component, and refuses to wrap the model", function()
    local code, _, err, out = run_config(TINY_RUN .. action([[
      local steps = 0
      node:wrap("optimizer", function(opt)
        return { zero_grad = function() opt:zero_grad() end, step = function() steps = steps + 1; opt:step() end }
      end)
      return { post_train = function(n, r) n.metrics:add("steps", r, steps) end }]]))
    assert.are.equal(0, code, err)
    assert.are.same({ { 1, 3 }, { 2, 6 }, { 3, 9 } }, node_metrics(out, 2).steps)
    code, _, err = run_config(TINY_RUN .. action([[node:wrap("model", function(m) return m end) return {}]]))
    assert.are.equal(1, code)
    assert.matches("node:wrap%('model'%): the optimizer was built from its parameters", err)
  end)

  it("cannot be reached around: no slot table on the node, rawset is caught at the lock", function()
    local code, _, err = run_config(TINY_RUN .. action([[
      assert(node._c == nil and getmetatable(node) == "dpy.Node")
      return { init = function(n) rawset(n, "sharing", {}) end }]]))
    assert.are.equal(1, code)
    assert.matches("'sharing' was set on the node table itself %(rawset%), around the container", err)
  end)

  it("names an outgoing modifier that returns no tensor", function()
    local code, _, err = run_config(TINY_RUN .. action("return { outgoing = function() return nil end }"))
    assert.are.equal(1, code)
    assert.matches("round 1: action 'a': outgoing returned nil, not a dpy.Tensor", err)
  end)

  it("names an outgoing modifier or a transform that sends what no receiver can take", function()
    -- each receiver would refuse it as malformed, and the run would end without a single average
    for _, case in ipairs {
      { "flat:narrow(0, 0, 10)", "outgoing returned 10 float32 values, the model has %d+ float32 values" },
      { 'flat:to("int64")', "outgoing returned %d+ int64 values, the model has %d+ float32 values" },
    } do
      local code, _, err = run_config(TINY_RUN .. action("return { outgoing = function(_, flat) return " .. case[1]
                                                         .. " end }"))
      assert.are.equal(1, code, err)
      assert.matches("nodes 0%-3 failed: round 1: action 'a': " .. case[2], err)
    end
    local dir = files { ["t.lua"] = [[
      return require("dpy.registry").register { kind = "transform", name = "same",
        new = function() return { label = "same", encode = function(t) return t:clone() end,
                                  decode = function(p) return p:clone() end } end }]] }
    local code, _, err = run_config(TINY_RUN .. "transforms = { '" .. dir .. "/t.lua' }\n")
    assert.are.equal(1, code, err)
    assert.matches("nodes 0%-3 failed: transforms%[1%] %(same%): encode returned a float32 tensor, not uint8", err)
  end)

  it("says in the summary how many payloads the nodes rejected as malformed #e2e", function()
    local code, out, err = run_config(TINY_RUN .. "faults = { corrupt = 0.5 }\n"
                                      .. "on_peer_failure = 'continue'\n")
    assert.are.equal(0, code, err)
    local n = tonumber(out:match("\n  (%d+) payloads? rejected as malformed %(the nodes' logs say why%)\n"))
    assert.truthy(n and n > 0, out)
  end)

  it("lets go of the modules only the build uses once the node is built; a later require loads them", function()
    -- taken while the node is built (its action file loads then); a full collection at startup
    -- frees what nothing holds but package.loaded. The launcher's own (dpy.config's loading and
    -- checks, dpy.layout's checks, dpy.graph's builders) never load in a node of a fixed graph: it
    -- reads the values and files they made
    local code, _, err, out = run_config(TINY_RUN .. action([[
      local build = setmetatable({ package.loaded["dpy.layout_files"] }, { __mode = "v" })
      local taken = build[1] ~= nil
      local function launchers()
        return (package.loaded["dpy.layout"] and 1 or 0) + (package.loaded["dpy.graph"] and 2 or 0)
               + (package.loaded["dpy.config"] and 4 or 0)
      end
      local launcher_building = launchers()
      return { startup = function(n)
        collectgarbage()
        collectgarbage()
        n.metrics:add("taken", 0, taken and 1 or 0)
        n.metrics:add("held", 0, build[1] and 1 or 0)
        n.metrics:add("launcher_modules", 0, launcher_building + launchers())
        n.metrics:add("loads_again", 0, require("dpy.layout_files").load_part and 1 or 0)
      end }]]))
    assert.are.equal(0, code, err)
    local m = node_metrics(out, 1)
    assert.are.same({ { 0, 1 } }, m.taken)
    assert.are.same({ { 0, 0 } }, m.held)
    assert.are.same({ { 0, 0 } }, m.launcher_modules)
    assert.are.same({ { 0, 1 } }, m.loads_again)
  end)

  it("loads the clock, churn and seeded-draw modules in the nodes of the runs that use them alone", function()
    -- a node's heap holds what its run uses; a run with stragglers, sim_clock and churn loads them
    local probe = action([[
      local lazy = { "dpy.simclock", "dpy.churn", "dpy.random" }
      return { post_train = function(n, r)
        for i, name in ipairs(lazy) do n.metrics:add(name, r, package.loaded[name] and 1 or 0) end
      end }]])
    local code, _, err, plain = run_config(TINY_RUN .. probe)
    assert.are.equal(0, code, err)
    local m = node_metrics(plain, 1)
    for _, name in ipairs { "dpy.simclock", "dpy.churn", "dpy.random" } do
      assert.are.same({ { 1, 0 }, { 2, 0 }, { 3, 0 } }, m[name], name)
    end
    local code2, _, err2, used = run_config(TINY_RUN .. probe .. "stragglers = { factors = { 1, 1, 1, 2 } }\n"
                                            .. "sim_clock = { step_seconds = 0.01, latency = 0.001 }\n"
                                            .. "churn = { { uid = 3, leave = 2, rejoin = 3 } }\n")
    assert.are.equal(0, code2, err2)
    m = node_metrics(used, 1)
    assert.are.same({ { 1, 1 }, { 2, 1 }, { 3, 1 } }, m["dpy.simclock"])
    assert.are.equal(1, m["dpy.churn"][#m["dpy.churn"]][2])
    assert.truthy(m.sim_seconds and #m.sim_seconds == 3, "the simulated clock ran")
  end)

  it("builds a chain of built-in transforms after init, when the config named none", function()
    -- the built-in transforms load by name (lua/dpy/transforms/), after the registry's freeze too
    local code, _, err, out = run_config(TINY_RUN .. action([[
      return { post_train = function(n, r)
        local chain = require("dpy.transforms").chain { "zstd" }
        local flat <close> = n.model:get_flat()
        local packed <close> = chain:encode(flat)
        local back <close> = assert(chain:decode(packed, flat:numel()))
        local diff <close> = back - flat
        n.metrics:add("same", r, back:numel() == flat:numel() and diff:norm():item() == 0 and 1 or 0)
      end }]]))
    assert.are.equal(0, code, err)
    assert.are.same({ { 1, 1 }, { 2, 1 }, { 3, 1 } }, node_metrics(out, 2).same)
  end)

  it("names the old outgoing list instead of stacking modifiers round after round", function()
    local code, _, err = run_config(TINY_RUN .. action(
      "return { pre_exchange = function(n) table.insert(n.outgoing, function(f) return f end) end }"))
    assert.are.equal(1, code)
    assert.matches("node.outgoing is gone: an action declares its modifier of the sent model once", err)
  end)
end)

describe("configs/examples/custom", function()
  it("runs: its own CSV dataset, model and sharing rule #e2e", function()
    local dir = tmpdir()
    assert.are.equal(0, (sh("cp -r " .. shell_quote(REPO .. "/configs/examples/custom") .. " " .. dir)))
    local code, out, err = sh(shell_quote(DPY_BIN) .. " " .. dir .. "/custom/make_data.lua " .. dir
                              .. "/custom/data 1200")
    assert.are.equal(0, code, err)
    assert.matches("train.csv: 1200 rows", out)
    code, out, err = sh(shell_quote(DPY_BIN) .. " run " .. dir .. "/custom/experiment.lua --out " .. dir
                        .. "/out rounds=2 eval_every=2 local_steps=2 test_samples=200")
    assert.are.equal(0, code, err)
    assert.matches("final test accuracy", out)
    local m = node_metrics(dir .. "/out", 0)
    assert.are.same(2, m.test_accuracy[1][1])
    assert.is_true(m.test_accuracy[1][2] > 0.3, "it learns")
  end)
end)
