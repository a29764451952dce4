-- Epidemic Learning (de Vos et al., NeurIPS 2023): the per-round random directed graphs of
-- EL-Oracle and EL-Local, and the algorithm `epidemic` end to end.
local graph = require "dpy.graph"

-- in- and out-degrees of a directed graph, and whether out and from agree, with no self-loop or
-- double edge
local function check_directed(g)
  local outd, ind, arcs = {}, {}, {}
  for u = 0, g.n - 1 do
    local seen = {}
    for _, v in ipairs(g.out[u]) do
      assert.are_not.equal(u, v, "a self-loop")
      assert.is_nil(seen[v], "a double edge")
      seen[v] = true
      arcs[u * g.n + v] = true
      ind[v] = (ind[v] or 0) + 1
    end
    outd[u] = #g.out[u]
  end
  for v = 0, g.n - 1 do
    assert.are.equal(ind[v] or 0, #g.from[v], "from lists every sender")
    for _, u in ipairs(g.from[v]) do assert.is_true(arcs[u * g.n + v], "from matches out") end
  end
  return outd, ind
end

describe("epidemic graphs", function()
  it("regular_directed: every node sends to s and receives from s, seeded", function()
    for _, case in ipairs { { 16, 3 }, { 64, 7 }, { 8, 7 }, { 5, 1 }, { 300, 7 } } do
      local n, s = case[1], case[2]
      local g = graph.regular_directed(n, s, 11)
      local outd, ind = check_directed(g)
      for u = 0, n - 1 do
        assert.are.equal(s, outd[u], "out-degree")
        assert.are.equal(s, ind[u], "in-degree")
      end
      assert.are.same(g.out, graph.regular_directed(n, s, 11).out)
    end
    -- directed: some arc has no reverse (an undirected graph would have them all)
    local g, oneway = graph.regular_directed(16, 3, 1), false
    for u = 0, 15 do
      for _, v in ipairs(g.out[u]) do
        local back = false
        for _, w in ipairs(g.out[v]) do back = back or w == u end
        oneway = oneway or not back
      end
    end
    assert.is_true(oneway)
    assert.error_matches(function() graph.regular_directed(4, 4, 1) end, "out%-degree 4 needs more than 4 nodes")
    assert.error_matches(function() graph.regular_directed(4, 0, 1) end, "out%-degree must be at least 1")
  end)

  it("random_out: s distinct targets per node, seeded per node; in-degrees vary", function()
    local g = graph.random_out(32, 5, 3)
    local outd, ind = check_directed(g)
    local min, max = math.huge, 0
    for u = 0, 31 do
      assert.are.equal(5, outd[u])
      min, max = math.min(min, ind[u] or 0), math.max(max, ind[u] or 0)
    end
    assert.is_true(max > min, "in-degrees vary")
    assert.are.same(g.out, graph.random_out(32, 5, 3).out)
    assert.are_not.same(g.out, graph.random_out(32, 5, 4).out)
    -- a node's own draw depends on the seed and its uid only, not on the node count's other nodes
    assert.are.same(graph.random_targets(32, 5, 3, 7), g.out[7])
  end)

  it("the rounds' graphs are the same for every caller and differ across rounds", function()
    local epidemic = require "dpy.algorithms.epidemic"
    local cfg = { seed = 5, nodes = 12 }
    for _, variant in ipairs { "oracle", "local" } do
      local a = epidemic.round_graph(cfg, variant, 3, 1)
      assert.are.same(a.out, epidemic.round_graph({ seed = 5, nodes = 12 }, variant, 3, 1).out)
      assert.are_not.same(a.out, epidemic.round_graph(cfg, variant, 3, 2).out)
      assert.are_not.same(a.out, epidemic.round_graph({ seed = 6, nodes = 12 }, variant, 3, 1).out)
    end
  end)
end)

local TINY, run = TINY_RUN, run_config
local RECORD = [[
local registry = require "dpy.registry"
return registry.register { kind = "sharing", name = "record",
  new = function() return { combine = function(node, r, got, weights, own)
    local sum = own
    for _, w in ipairs(weights) do sum = sum + w end
    node.metrics:add("weight_sum", r, sum)
    node.metrics:add("own_weight", r, own)
    node.model:mix(own, got, weights)
  end } end }
]]

describe("epidemic learning #e2e", function()
  local function el(variant, extra)
    local dir = tmpdir()
    write_file(dir .. "/record.lua", RECORD)
    return TINY .. string.format("rounds = 4\nalgorithm = { 'epidemic', variant = '%s', s = 2 }\n"
                                 .. "sharing = '%s/record.lua'\n", variant, dir) .. (extra or "")
  end

  for _, variant in ipairs { "oracle", "local" } do
    it("EL-" .. variant .. ": bit-identical in every process layout, s models sent, weights summing to 1",
      function()
        local outs = run_layouts(el(variant))
        local counts = {}
        for uid = 0, 3 do
          local a, b = node_metrics(outs[1], uid), node_metrics(outs[2], uid)
          assert.are.same(a.train_loss, b.train_loss)
          assert.are.same(a.test_accuracy, b.test_accuracy)
          assert.are.same(a.models_received, b.models_received)
          for i, e in ipairs(a.models_received) do
            local k = e[2]
            counts[k] = true
            if variant == "oracle" then assert.are.equal(2, k) end
            assert.is_true(math.abs(a.weight_sum[i][2] - 1) < 1e-12, "weights sum to 1")
            assert.is_true(math.abs(a.own_weight[i][2] - 1 / (k + 1)) < 1e-12, "own weight 1/(received + 1)")
            -- s models out, each the cnn's 215,370 float32 values plus a 40-byte header
            assert.are.same({ e[1], 2 * (215370 * 4 + 40) }, a.bytes_sent[i])
            assert.are.same({ e[1], k * (215370 * 4 + 40) }, a.bytes_received[i])
          end
        end
        if variant == "local" then
          local n = 0
          for _ in pairs(counts) do n = n + 1 end
          assert.is_true(n > 1, "EL-Local's received counts vary")
        end
      end)
  end

  it("sparsifies with topk (fewer bytes, bit-identical layouts); refuses choco, whose copies need a fixed graph",
    function()
      local cfg = TINY .. "rounds = 3\nalgorithm = { 'epidemic', variant = 'local', s = 2 }\n"
                  .. "sharing = { 'topk', alpha = 0.05 }\n"
      local outs = run_layouts(cfg)
      for uid = 0, 3 do
        local a, b = node_metrics(outs[1], uid), node_metrics(outs[2], uid)
        assert.are.same(a.train_loss, b.train_loss)
        assert.are.same(a.test_accuracy, b.test_accuracy)
        for _, e in ipairs(a.bytes_sent) do
          assert.is_true(e[2] < 2 * 215370 * 4 * 0.2, "a 5 % top-k is far smaller than the model")
        end
      end
      local code, _, err = run(TINY .. "algorithm = { 'epidemic', s = 2 }\nsharing = 'choco'\n")
      assert.are.equal(1, code)
      assert.matches("choco keeps a public copy per neighbour: it needs a static graph", err)
    end)

  it("refuses s >= nodes and a sharing rule with messages of its own: config errors, before writing", function()
    local code, _, err, out = run(TINY .. "algorithm = { 'epidemic', s = 4 }\n")
    assert.are.equal(2, code)
    assert.matches("epidemic: s = 4 needs more than 4 nodes", err)
    assert.is_nil(io.open(out .. "/config.json"))
    code, _, err = run(TINY .. "algorithm = 'epidemic'\nsharing = 'secure_average'\n")
    assert.are.equal(2, code)
    assert.matches("epidemic: sharing 'secure_average' exchanges messages of its own", err)
  end)
end)

-- A sharing rule that checks what it gets: every sender replaces its model by the round number
-- (CONST, an outgoing modifier), so a received model of another round shows.
local CHECKED = [[
local registry = require "dpy.registry"
return registry.register { kind = "sharing", name = "checked",
  new = function() return { combine = function(node, r, got, weights, own)
    local foreign = 0
    for _, x in ipairs(got) do
      if x:min():item() ~= r or x:max():item() ~= r then foreign = foreign + 1 end
    end
    node.metrics:add("foreign", r, foreign)
    node.metrics:add("got", r, #got)
    node.model:mix(own, got, weights)
  end } end }
]]

describe("configs/epidemic/compare.lua #e2e", function()
  it("prints the rounds to the target per seed for the three topologies, goes on where it stopped, and reads "
     .. "a shorter table from longer runs", function()
    local function compare(tmp, rounds, extra)
      local code, o, e = sh(string.format("TMPDIR=%s %s %s 6 2 %d 1 1 0.3 100 %s", tmp, shell_quote(DPY_BIN),
                                          shell_quote(REPO .. "/configs/epidemic/compare.lua"), rounds,
                                          extra or ""))
      assert.are.equal(0, code, e)
      local _, read = e:gsub("finished before, 10 rounds", "")
      return (o:gsub("%(%d+ s%)", "")), e, read
    end
    local tmp = tmpdir()
    local o, e, read = compare(tmp, 10)
    for _, label in ipairs { "static 2%-regular %(D%-PSGD%)", "EL%-Oracle", "EL%-Local" } do
      assert.matches("\n| " .. label .. " | [>%d]+ | [>%d]+ | ", o)
    end
    assert.matches("EL%-Local, seed 1: .* s%)", e)
    assert.are.equal(0, read, e)
    -- run again: every run is found finished and read, the table the same
    local o2, e2, read2 = compare(tmp, 10)
    assert.are.equal(3, read2, e2)
    assert.are.equal(o, o2)
    -- 5 rounds: read from the 10-round runs, the table that of fresh 5-round runs
    local o5, e5, read5 = compare(tmp, 5)
    assert.are.equal(3, read5, e5)
    local fresh, e6, read6 = compare(tmpdir(), 5)
    assert.are.equal(0, read6, e6)
    assert.are.equal(fresh, o5)
    assert.are_not.equal(o, o5)
    -- KEY=VALUE: a line of every run's config, runs of their own (a folder named by it)
    local ol, el, readl = compare(tmp, 5, [['optimizer={"sgd",lr=0.01}']])
    assert.are.equal(0, readl, el)
    assert.matches('5 rounds, optimizer={"sgd",lr=0.01}', ol, 1, true)
    assert.are_not.equal(o5:match("\n.*"), ol:match("\n.*"))
    local f = assert(io.open(tmp .. "/dpy_epidemic_6_2_1_100_optimizer_sgd_lr_0_01_/EL_Local_1.lua"))
    assert.matches('\noptimizer={"sgd",lr=0.01}\n$', f:read("a"))
    f:close()
    -- a run that diverges is a result, not a failure: the table says from which round
    local od, ed = compare(tmp, 5, [['optimizer={"sgd",lr=1e6}']])
    for _, label in ipairs { "static 2%-regular %(D%-PSGD%)", "EL%-Oracle", "EL%-Local" } do
      assert.matches("\n| " .. label .. " | diverged %(round %d%) | ", od, 1)
    end
    assert.matches("EL%-Local, seed 1: diverged %(round %d%)", ed)
  end)
end)

describe("round deadlines #e2e", function()
  local function deadline_run(algorithm, extra)
    local dir = tmpdir()
    write_file(dir .. "/checked.lua", CHECKED)
    -- outgoing(node, flat, round): here (node, r) are node and flat
    local const = action_config("const", "outgoing", "return tensor.full({ r:numel() }, node.round)",
                                "local tensor = require 'dpy.tensor'")
    return TINY .. "rounds = 4\nround_timeout = 0.25\nfaults = { delay = 1.0 }\non_peer_failure = 'abort'\n"
           .. algorithm .. string.format("sharing = '%s/checked.lua'\n", dir) .. const .. (extra or "")
  end

  for _, algorithm in ipairs { "algorithm = 'dpsgd'\n", "algorithm = { 'epidemic', variant = 'oracle', s = 2 }\n" } do
    it("aggregate what came by the deadline; a late message is counted, never mixed into a later round ("
       .. algorithm:match("'(%w+)'") .. ")", function()
      for _, p in ipairs { 1, 2 } do
        local code, _, err, out = run(deadline_run(algorithm), "processes=" .. p)
        assert.are.equal(0, code, err)
        local late, missed = 0, 0
        for uid = 0, 3 do
          local m = node_metrics(out, uid)
          assert.are.equal(4, #m.late_messages)
          for i = 1, 4 do
            assert.are.equal(0, m.foreign[i][2], "a model of another round was aggregated")
            late = late + m.late_messages[i][2]
            missed = missed + (2 - m.got[i][2])
          end
        end
        assert.is_true(missed > 0, "some models missed the deadline")
        assert.is_true(late > 0, "late messages were counted")
        assert.is_true(late <= missed, "only missed models are late")
      end
    end)
  end

  it("is a positive number of seconds", function()
    local code, _, err = run(TINY .. "round_timeout = 0\n")
    assert.are.equal(2, code)
    assert.matches("c.lua:11: config key 'round_timeout' must be a number > 0 and <= 1000000000, got 0", err)
  end)
end)
