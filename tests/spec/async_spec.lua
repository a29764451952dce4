-- Asynchronous gossip (algorithm async: push-sum, as Stochastic Gradient Push): no global rounds,
-- each node pushes half of its mass to a random neighbour at its own pace and absorbs whatever came.
local TINY, run = TINY_RUN, run_config

describe("asynchronous gossip #e2e", function()
  it("keeps the models' mass exactly when nothing trains (lr = 0), and mixes them", function()
    -- every node starts from a model of constant value uid + 1 (mean 2.5); at the end it records its
    -- model's value and its push-sum weight
    local start = action_config("distinct", "startup",
      "node.model:set_flat(tensor.full({ node.model:numel() }, node.uid + 1))", "local tensor = require 'dpy.tensor'")
    local finish = action_config("final", "shutdown", [[
      local flat = node.model:get_flat()
      node.metrics:add("final_value", 0, flat:mean():item())
      node.metrics:add("final_spread", 0, (flat:max() - flat:min()):item())
      node.metrics:add("final_weight", 0, node.push_weight)
      flat:free()]])
    local actions = "actions = { " .. start:match("{ (.-) }") .. ", " .. finish:match("{ (.-) }") .. " }\n"
    -- lr must be > 0: 1e-300 is 0 in the float32 update
    local cfg = TINY .. "rounds = 6\nalgorithm = 'async'\noptimizer = { 'sgd', lr = 1e-300 }\n" .. actions
    for _, p in ipairs { 1, 2 } do
      local code, _, err, out = run(cfg, "processes=" .. p)
      assert.are.equal(0, code, err)
      local mass, weight, moved = 0, 0, false
      for uid = 0, 3 do
        local m = node_metrics(out, uid)
        local v, w = m.final_value[1][2], m.final_weight[1][2]
        assert.is_true(m.final_spread[1][2] < 1e-5, "a node's model stays a constant vector")
        mass, weight = mass + v * w, weight + w
        moved = moved or math.abs(v - (uid + 1)) > 1e-3
        assert.are.equal(6, #m.models_received)
      end
      assert.are.equal(4, weight, "the weights' sum: halvings and sums of dyadic numbers are exact")
      assert.is_true(math.abs(mass - 10) < 1e-4, "the models' mass: " .. mass)
      assert.is_true(moved, "the models mixed")
    end
  end)

  it("refuses checkpoints and the simulated clock, naming them: config errors (exit 2)", function()
    local code, _, err = run(TINY .. "algorithm = 'async'\ncheckpoint_every = 1\n")
    assert.are.equal(2, code)
    assert.matches("async: checkpoint_every is not supported", err)
    code, _, err = run(TINY .. "algorithm = 'async'\nround_timeout = 1\n")
    assert.are.equal(2, code)
    assert.matches("async: round_timeout does not apply", err)
    code, _, err = run(TINY .. "algorithm = 'async'\nsim_clock = { step_seconds = 0.1 }\n")
    assert.are.equal(2, code)
    assert.matches("sim_clock: simulates dpsgd and epidemic .-, not async", err)
    -- push-sum pushes the model itself: a sparsifying rule's payload would lose mass
    code, _, err = run(TINY .. "algorithm = 'async'\nsharing = { 'topk', alpha = 0.1 }\n")
    assert.are.equal(2, code)
    assert.matches("async: pushes the whole model %(push%-sum%); sharing 'topk' does not apply", err)
  end)

  it("trains: the loss falls and every node evaluates", function()
    local code, _, err, out = run(TINY .. "rounds = 4\nalgorithm = 'async'\n")
    assert.are.equal(0, code, err)
    for uid = 0, 3 do
      local m = node_metrics(out, uid)
      assert.are.equal(4, #m.test_accuracy)
      assert.are.equal(4, #m.push_weight)
    end
  end)
end)
