-- dpy.honest: one definition of a run's honest nodes, used by the end-of-run summary and by report.
local honest = require "dpy.honest"
local json = require("dpy.metrics").json

local function run_dir(manifest)
  local dir = tmpdir()
  write_file(dir .. "/manifest.json", json.encode(manifest))
  return dir
end

describe("honest nodes", function()
  it("are the nodes no action recorded as poisoned or Byzantine in manifest.json", function()
    local dir = run_dir { nodes = 8, actions = { label_flipping = { poisoned = { 5, 2 } },
                                                 byzantine_attack = { byzantine = { 2, 7 } },
                                                 model_norm = {} } }
    local h = assert(honest.of_run(dir, 8))
    assert.are.same({ 0, 1, 3, 4, 6 }, h.uids)
    assert.are.equal(5, h.count)
    assert.is_true(h.set[0] and not h.set[2] and not h.set[7])
    assert.are.equal("honest nodes: 5 of 8 (left out: 2, 7 byzantine by byzantine_attack; 2, 5 poisoned by "
                     .. "label_flipping)", honest.describe(h))
    assert.are.equal("honest nodes: 4 of 4", honest.describe(assert(honest.of_run(run_dir { nodes = 4 }, 4))))
  end)

  it("refuse a manifest that lists no node or is missing", function()
    local h, err = honest.of_run(run_dir { actions = { label_flipping = { poisoned = { 4 } } } }, 4)
    assert.is_nil(h)
    assert.matches("manifest.json: actions.label_flipping.poisoned lists 4, not a node %(0..3%)", err)
    h, err = honest.of_run(run_dir { actions = { label_flipping = { poisoned = "all" } } }, 4)
    assert.is_nil(h)
    assert.matches("manifest.json: actions.label_flipping.poisoned must be a list of uids", err)
    h, err = honest.of_run(tmpdir(), 4)
    assert.is_nil(h)
    assert.matches("manifest.json: No such file", err)
  end)

  it("are the same in the summary of a poisoned run and in its report", function()
    local code, stdout, err, out = run_config(TINY_RUN .. "actions = { { 'label_flipping', nodes = { 2 } } }\n")
    assert.are.equal(0, code, err)
    local said = "honest nodes: 3 of 4 %(left out: 2 poisoned by label_flipping%)"
    assert.matches("\n  " .. said .. "\n", stdout)
    local mean, lo, hi = stdout:match("final test accuracy over 3 evaluated honest nodes: mean (%d%.%d+), "
                                      .. "min (%d%.%d+), max (%d%.%d+)")
    assert.is_truthy(mean, stdout)
    -- against the metrics files: nodes 0, 1 and 3
    local finals = {}
    for _, uid in ipairs { 0, 1, 3 } do
      local acc = node_metrics(out, uid).test_accuracy
      finals[#finals + 1] = acc[#acc][2]
    end
    assert.are.equal(string.format("%.4f", (finals[1] + finals[2] + finals[3]) / 3), mean)
    assert.are.equal(string.format("%.4f", math.min(table.unpack(finals))), lo)
    assert.are.equal(string.format("%.4f", math.max(table.unpack(finals))), hi)

    local rc, report, rerr = sh(shell_quote(DPY_BIN) .. " report " .. out .. " --out " .. tmpdir())
    assert.are.equal(0, rc, rerr)
    assert.matches("\nout%s+c%s+" .. mean:gsub("%.", "%%.") .. " %+%- %d%.%d+ %(3%)", report)
    assert.matches("\nout: " .. said .. "\n", report)
  end)
end)
