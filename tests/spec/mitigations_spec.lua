-- Privacy, robustness and efficiency in decentralized runs, end to end through the binary:
-- transforms on the wire, a receiver configured differently, trimmed mean, label flipping, DP-SGD,
-- and dpy-lua report over the runs.

describe("mitigations in decentralized runs", function()
  it("send 8-bit quantized models: 4x fewer payload bytes, the chain's bytes in the metrics", function()
    local cfg = TINY_RUN .. "transforms = { { 'uniform_asymmetric_quantization', bits = 8 } }\n"
    local code, _, err, out = run_config(cfg)
    assert.are.equal(0, code, err)
    local m = node_metrics(out, 1)
    -- a ring: two neighbours; 215,370 codes + a 24-byte header + one scale and zero point
    assert.are.same({ 1, 2 * (215370 + 24 + 8 + 40) }, m.bytes_sent[1])
    assert.are.same({ 2, 215370 * 4 }, m.transform_1_uniform_asymmetric_quantization_bytes_in[2])
    assert.are.same({ 2, 215370 + 32 }, m.transform_1_uniform_asymmetric_quantization_bytes_out[2])
    assert.is_true(m.test_accuracy[3][2] > 0.2, "it still learns (chance: 0.1)")
  end)

  it("reject a payload encoded by another chain, with a log line, and keep running", function()
    local dir = tmpdir()
    write_file(dir .. "/odd.lua", [[
      local registry = require "dpy.registry"
      return registry.register { kind = "action", name = "odd", new = function(_, node)
        if node.uid == 1 then node:wrap("chain", function() return require("dpy.transforms").chain { "zstd" } end) end
      end }
    ]])
    local cfg = TINY_RUN .. "transforms = { 'fpzip' }\nactions = { '" .. dir .. "/odd.lua' }\n"
    local code, _, err, out = run_config(cfg)
    assert.are.equal(0, code, err)
    local log = read_file(out .. "/0.log")
    assert.matches("round 1: rejected node 1's payload: encoded by transform chain %x+, but this node "
                   .. "decodes %x+ %(fpzip%(precision=0%)%)", log)
    assert.matches("round 1: rejected node 0's payload: encoded by transform chain %x+, but this node "
                   .. "decodes %x+ %(zstd%(level=3%)%)", read_file(out .. "/1.log"))
    assert.are.equal(3, #node_metrics(out, 0).test_accuracy)
  end)

  it("trimmed_mean aggregates, and says when too few models arrive for the trim", function()
    local code, _, err, out = run_config(TINY_RUN .. "sharing = { 'trimmed_mean', f = 1 }\n")
    assert.are.equal(0, code, err)
    assert.is_true(node_metrics(out, 0).test_accuracy[3][2] > 0.2)
    -- a graph whose every round gives too few models for the trim: refused before the run (the nodes
    -- all failed in round 1, exit 1, a run directory written)
    code, _, err = run_config(TINY_RUN .. "sharing = { 'trimmed_mean', f = 2 }\n")
    assert.are.equal(2, code, err)
    assert.matches("^dpy%-lua: [^\n]*c%.lua:%d+: sharing: trimmed_mean: node 0 has 2 neighbours, so its rounds "
                   .. "aggregate 3 models: trimmed_mean: n = 3, f = 2 is outside what it tolerates %(n > 2f%)", err)
  end)

  it("flip the labels a partial map names, the others kept, and name a class the data has not", function()
    -- each node's training labels counted by class: node 2 flipped, node 3 as the data has them
    local count = action_config("count", "startup", [[
      local n = {}
      for c = 0, 9 do n[#n + 1] = node.train_set.labels:eq(c):sum():item() end
      node.log:write("classes %s", table.concat(n, " "))]])
    local flip = "actions = { { 'label_flipping', nodes = { 2 }, map = { [0] = 9 } }, '"
                 .. count:match("'(.-)'") .. "' }\n"
    local code, _, err, out = run_config(TINY_RUN .. flip)
    assert.are.equal(0, code, err)
    assert.matches("label_flipping: this node trains on flipped labels", read_file(out .. "/2.log"))
    local function classes(uid)
      local t = {}
      local line = read_file(out .. "/" .. uid .. ".log"):match("classes ([%d ]+)")
      for v in line:gmatch("%d+") do t[#t + 1] = tonumber(v) end
      return t
    end
    local flipped, plain = classes(2), classes(3)
    assert.is_true(plain[1] > 0 and plain[10] > 0)
    assert.are.same({ 0, plain[10] + plain[1] }, { flipped[1], flipped[10] })   -- 0 became 9
    for c = 2, 9 do assert.are.equal(plain[c], flipped[c], "class " .. c - 1 .. " kept") end
    code, _, err = run_config(TINY_RUN .. "actions = { { 'label_flipping', nodes = { 2 }, map = { [12] = 0 } } }\n")
    assert.are.equal(2, code)   -- refused before the run, as the config check reads the data
    assert.matches("actions%[1%]: label_flipping: map%[12%] = 0: the data's classes are 0%.%.9", err)
  end)

  it("flip the labels of chosen nodes, DP-SGD records epsilon, and report compares the runs", function()
    local cfg = TINY_RUN .. "actions = { { 'label_flipping', nodes = { 2 } }, "
                .. "{ 'differential_privacy', clip = 1.0, noise = 1.1 } }\n"
    local code, _, err, out = run_config(cfg)
    assert.are.equal(0, code, err)
    assert.matches('"poisoned":%[2%]', read_file(out .. "/manifest.json"))
    assert.matches("label_flipping: this node trains on flipped labels", read_file(out .. "/2.log"))
    assert.is_nil(read_file(out .. "/1.log"):match("flipped"))
    local eps = node_metrics(out, 0).epsilon
    assert.are.equal(3, #eps)
    assert.is_true(eps[1][2] > 0 and eps[2][2] > eps[1][2] and eps[3][2] > eps[2][2])
    -- 3 rounds x 3 steps, q = 16 / 500 per node, sigma 1.1, delta 1e-5
    local privacy = require "dpy.privacy"
    assert.is_true(math.abs(eps[3][2] - privacy.epsilon(16 / 500, 1.1, 9, 1e-5)) < 1e-9)

    local code2, _, err2, clean = run_config(TINY_RUN)
    assert.are.equal(0, code2, err2)
    local plots = tmpdir()
    local rc, stdout, stderr = sh(shell_quote(DPY_BIN) .. " report " .. out .. " " .. clean .. " --out " .. plots)
    assert.are.equal(0, rc, stderr)
    -- node 2 is poisoned: three honest nodes; epsilon only where DP ran
    -- two configs named c with one seed: told apart by their directories
    assert.matches("out%s+c seed=2 %([^)]+/out%)%s+%d%.%d+ %+%- %d%.%d+ %(3%)%s+%d+%.%d+%s+%d+%.%d+%s+%d+%.%d+", stdout)
    assert.matches("out%s+c seed=2 %([^)]+/out%)%s+%d%.%d+ %+%- %d%.%d+ %(4%)%s+%d+%.%d+%s+%-%s+%d+%.%d+", stdout)
    for _, name in ipairs { "accuracy_round", "accuracy_bytes", "accuracy_time", "loss_round" } do
      assert.matches("<svg", read_file(plots .. "/report_" .. name .. ".svg"))
    end
    rc, _, stderr = sh(shell_quote(DPY_BIN) .. " report " .. plots)
    assert.are.equal(1, rc)
    assert.matches("not a run directory %(no readable config.json%)", stderr)
  end)
end)

describe("Byzantine nodes in decentralized runs", function()
  it("send the attack's vector: plain averaging breaks, the median holds #e2e", function()
    local cfg = TINY_RUN .. "actions = { { 'byzantine_attack', attack = { 'sign_flip', scale = 3 }, "
                .. "nodes = { 1 } } }\n"
    local acc = {}
    for _, sharing in ipairs { "'average'", "{ 'median', f = 1 }" } do
      local code, _, err, out = run_config(cfg .. "sharing = " .. sharing .. "\n")
      assert.are.equal(0, code, err)
      assert.matches('"byzantine":%[1%]', read_file(out .. "/manifest.json"))
      assert.matches("byzantine_attack: this node sends sign_flip vectors", read_file(out .. "/1.log"))
      local sum = 0
      for _, uid in ipairs { 0, 2, 3 } do sum = sum + node_metrics(out, uid).test_accuracy[3][2] end
      acc[sharing] = sum / 3
    end
    assert.is_true(acc["'average'"] < 0.15, "average: " .. acc["'average'"])
    assert.is_true(acc["{ 'median', f = 1 }"] > 0.2, "median: " .. acc["{ 'median', f = 1 }"])
  end)
end)
