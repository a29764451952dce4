-- Node churn (dpy.churn): nodes absent for some rounds, on a schedule every node derives from the
-- config; their neighbours aggregate without them.
local churn = require "dpy.churn"
local exchange = require "dpy.exchange"
local graph = require "dpy.graph"

describe("a churn schedule", function()
  local function cfg(c, extra)
    local t = { seed = 3, nodes = 8, rounds = 10, churn = c }
    for k, v in pairs(extra or {}) do t[k] = v end
    return t
  end

  it("lists each node's absent rounds: from leave to before rejoin, or to the end", function()
    local c = cfg { { uid = 3, leave = 2, rejoin = 4 }, { uid = 5, leave = 7 }, { uid = 3, leave = 9, rejoin = 10 } }
    local absent = {}
    for u = 0, 7 do
      for r = 1, 10 do
        if churn.absent(c, u, r) then absent[#absent + 1] = u .. ":" .. r end
      end
    end
    assert.are.same({ "3:2", "3:3", "3:9", "5:7", "5:8", "5:9", "5:10" }, absent)
    assert.is_true(churn.absent(c, 3.0, 2))   -- uids read from graph.json
    assert.are.same({ 0, 2, 4 }, churn.present(c, { 0, 2, 3, 4, 5 }, 9))
    assert.are.equal(4, churn.rejoin(c, 3, 2))
    assert.is_nil(churn.rejoin(c, 5, 7))
    assert.is_false(churn.absent(cfg(nil), 3, 2))
  end)

  it("draws a seeded fraction of the nodes, each absent for leave_rounds rounds", function()
    local c = cfg { fraction = 0.25, leave_rounds = 3 }
    local s = churn.schedule(c)
    local count = 0
    for u, spans in pairs(s) do
      count = count + 1
      assert.are.equal(1, #spans)
      local leave, rejoin = spans[1][1], spans[1][2]
      assert.are.equal(3, rejoin - leave)
      assert.is_true(leave >= 1 and rejoin <= 11, u .. ": " .. leave)
    end
    assert.are.equal(2, count)
    assert.are.same(s, churn.schedule(cfg { fraction = 0.25, leave_rounds = 3 }))
    assert.are_not.same(s, churn.schedule(cfg({ fraction = 0.25, leave_rounds = 3 }, { seed = 4 })))
  end)

  it("tells each node who is absent from a seeded schedule drawn once per process", function()
    -- every node asks (its own rounds, its neighbours'): each drew the whole schedule, O(nodes) a node
    local c = cfg { fraction = 0.25, leave_rounds = 3 }
    local s = churn.schedule(c)
    for u = 0, 7 do
      for r = 1, 10 do
        local span = s[u] and s[u][1]
        local node_cfg = cfg { fraction = 0.25, leave_rounds = 3 }   -- a node's own copy, as in its own state
        assert.are.equal(span ~= nil and r >= span[1] and r < span[2], churn.absent(node_cfg, u, r), u .. ":" .. r)
      end
    end
    local function big()
      return { seed = 1, nodes = 1000000, rounds = 20, churn = { fraction = 0.1, leave_rounds = 2 } }
    end
    churn.absent(big(), 0, 1)
    collectgarbage("stop")
    local before = collectgarbage("count")
    for u = 1, 20 do churn.absent(big(), u, 3) end
    local kib = collectgarbage("count") - before
    collectgarbage("restart")
    assert.is_true(kib < 64, string.format("20 nodes' questions took %.0f KiB at a million nodes", kib))
  end)

  it("refuses a malformed config", function()
    local cases = {
      { { { uid = 1, leave = 4, rejoin = 4 } }, "churn%[1%]: rejoin %(4%) must come after leave %(4%)" },
      { { { uid = 1 } }, "churn%[1%]: option 'leave' is required" },
      { { { uid = 1, leave = 2, rejion = 3 } }, "churn%[1%]: unknown option 'rejion' %(did you mean 'rejoin'%?%)" },
      { { 3 }, "churn%[1%]: a table { uid =, leave = %[, rejoin =%] } expected" },
      { { { uid = 1, leave = 2 }, fraction = 0.5 }, "got both %(key 'fraction'%)" },
      -- the check's own words name the key: not "config key 'churn' churn: ..."
      { { fraction = 0.5 }, "^churn: option 'leave_rounds' is required" },
      { { { uid = 1, leave = 4, rejoin = 2 } }, "^churn%[1%]: rejoin %(2%) must come after leave %(4%)" },
      { { fraction = 0, leave_rounds = 1 }, "churn: option 'fraction' must be" },
    }
    local config = require "dpy.config"
    for _, c in ipairs(cases) do assert.matches(c[2], config.check("churn", c[1])) end
    assert.is_nil((config.check("churn", { { uid = 1, leave = 2, rejoin = 3 } })))
    assert.error_matches(function() churn.schedule(cfg { { uid = 8, leave = 2 } }) end,
                         "churn%[1%]: uid 8 is not a node of the run %(nodes = 8%)")
  end)

  it("leaves an absent node out of its neighbours' round graph: their weights still sum to 1", function()
    local g = graph.ring(5)
    local c = cfg({ { uid = 3, leave = 2, rejoin = 4 } }, { nodes = 5 })
    local function node(uid) return { uid = uid, cfg = c, graph = g } end
    local _, peers = exchange.neighbours(node(2), 1)
    assert.are.same({ 1, 3 }, peers)
    for _, u in ipairs { 0, 1, 2, 4 } do
      local rg, live = exchange.neighbours(node(u), 2)
      for _, v in ipairs(live) do assert.are_not.equal(3, v) end
      local w, sum = graph.metropolis_hastings(rg, u), 0
      for _, x in pairs(w) do sum = sum + x end
      assert.is_true(math.abs(sum - 1) < 1e-15, u)
      for _, v in ipairs(live) do   -- symmetric: the mean of the present nodes' models is kept
        assert.are.equal(w[v], graph.metropolis_hastings(rg, v)[u])
      end
    end
    assert.are.same({ 1 }, select(2, exchange.neighbours(node(2), 3)))
    assert.are.same({ 1, 3 }, select(2, exchange.neighbours(node(2), 4)))
  end)
end)

describe("churn #e2e", function()
  local TINY = TINY_RUN .. "rounds = 4\nchurn = { { uid = 3, leave = 2, rejoin = 4 } }\n"
  -- a sharing rule that averages as `average` does and records what it combined
  local function probe()
    local path = tmpdir() .. "/probe.lua"
    write_file(path, [[
      local registry = require "dpy.registry"
      return registry.register { kind = "sharing", name = "probe", new = function()
        return { combine = function(node, r, got, weights, own)
          local sum = own
          for _, w in ipairs(weights) do sum = sum + w end
          node.metrics:add("weight_sum", r, sum)
          node.metrics:add("models_in", r, #got)
          node.model:mix(own, got, weights)
        end }
      end }
    ]])
    return "sharing = '" .. path .. "'\n"
  end
  local function series(m, name)
    local out = {}
    for _, e in ipairs(m[name] or {}) do out[e[1]] = e[2] end
    return out
  end

  it("dpsgd: an absent node neither trains nor sends, its neighbours go on without it, in every layout", function()
    local outs = run_layouts(TINY .. probe() .. "sim_clock = { step_seconds = 0.01, latency = 0.005 }\n")
    for uid = 0, 3 do
      local a, b = node_metrics(outs[1], uid), node_metrics(outs[2], uid)
      for _, k in ipairs { "train_loss", "test_accuracy", "test_loss", "absent", "weight_sum", "models_in",
                           "sim_seconds" } do
        assert.are.same(a[k], b[k], uid .. " " .. k)
      end
      local absent, loss, sent = series(a, "absent"), series(a, "train_loss"), series(a, "bytes_sent")
      local sums, got = series(a, "weight_sum"), series(a, "models_in")
      for r = 1, 4 do
        local out = uid == 3 and (r == 2 or r == 3)
        assert.are.equal(out and 1 or 0, absent[r], uid .. " " .. r)
        if out then
          assert.is_nil(loss[r])
          assert.are.equal(0, sent[r])
          assert.is_nil(sums[r])
        else
          assert.is_number(loss[r])
          assert.is_true(sent[r] > 0)
          assert.is_true(math.abs(sums[r] - 1) < 1e-12, uid .. " " .. r)
          -- the ring's neighbours of node 3 (0 and 2) get one model while it is away
          local neighbour_of_absent = (uid == 0 or uid == 2) and (r == 2 or r == 3)
          assert.are.equal(neighbour_of_absent and 1 or 2, got[r], uid .. " " .. r)
        end
      end
      local sim = series(a, "sim_seconds")
      if uid == 3 then   -- it keeps its model while away, and rejoins with it; its clock stands still
        local acc = series(a, "test_accuracy")
        assert.are.equal(acc[1], acc[2])
        assert.are.equal(acc[1], acc[3])
        assert.are.same({ sim[1], sim[1] }, { sim[2], sim[3] })
      end
      -- by hand: 3 steps of 0.01 s a round, and a neighbour's model 0.005 s later; node 1 never
      -- waits on the absent node, so every round of it takes 0.035 s
      if uid == 1 then
        for r = 1, 4 do assert.is_true(math.abs(sim[r] - 0.035 * r) < 1e-12, r) end
      end
    end
  end)

  it("epidemic: no model goes to or comes from an absent node", function()
    local epidemic = require "dpy.algorithms.epidemic"
    local code, _, err, out = run_config(TINY .. "algorithm = { 'epidemic', s = 2 }\n")
    assert.are.equal(0, code, err)
    local cfg = { seed = 2, nodes = 4, rounds = 4, churn = { { uid = 3, leave = 2, rejoin = 4 } } }
    for uid = 0, 3 do
      local m = node_metrics(out, uid)
      local got = series(m, "models_received")
      for r = 1, 4 do
        if churn.absent(cfg, uid, r) then
          assert.is_nil(got[r])
        else
          local from = epidemic.round_graph(cfg, "oracle", 2, r).from[uid]
          assert.are.equal(#churn.present(cfg, from, r), got[r], uid .. " " .. r)
        end
      end
    end
  end)

  it("is refused for an algorithm it does not work with", function()
    local code, _, err = run_config(TINY .. "algorithm = 'fedavg'\n")
    assert.are_not.equal(0, code)
    assert.matches("churn: works with dpsgd and epidemic", err)
  end)
end)
