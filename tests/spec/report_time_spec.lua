-- dpy-lua report against time: a run's accuracy curve carries, per evaluation round, the time the
-- network took to get there (the slowest node): simulated seconds where the run has sim_clock, else
-- the cumulative wall seconds.
local report = require "dpy.report"
local metrics = require "dpy.metrics"

local function fake_run(series)
  local dir = tmpdir()
  write_file(dir .. "/config.json", metrics.json.encode { name = "fake", nodes = #series })
  write_file(dir .. "/manifest.json", "{}")
  for uid, m in ipairs(series) do
    write_file(string.format("%s/%d.metrics.json", dir, uid - 1), metrics.json.encode { uid = uid - 1, metrics = m })
  end
  return dir
end

describe("report against time", function()
  it("uses the slowest node's cumulative wall seconds", function()
    local run = assert(report.load(fake_run {
      { test_accuracy = { { 2, 0.5 } }, wall_seconds = { { 1, 1.0 }, { 2, 2.0 } },
        bytes_sent = { { 1, 10 }, { 2, 10 } } },
      { test_accuracy = { { 2, 0.7 } }, wall_seconds = { { 1, 1.5 }, { 2, 2.5 } },
        bytes_sent = { { 1, 10 }, { 2, 10 } } },
    }))
    assert.is_false(run.simulated)
    assert.are.equal(1, #run.curve)
    assert.are.equal(2, run.curve[1][1])
    assert.is_true(math.abs(run.curve[1][2] - 0.6) < 1e-12)
    assert.are.equal(20, run.curve[1][3])
    assert.are.equal(4.0, run.curve[1][4])   -- node 1: 1.5 + 2.5
  end)

  it("gives the slowest node's own seconds per round, not the sum of each round's slowest", function()
    -- a synchronous round's wait falls on one node, then on another: each node took 4 s for its two
    -- rounds (2 s a round), and so did the run; each round's slowest node took 3 s
    local run = assert(report.load(fake_run {
      { test_accuracy = { { 2, 0.5 } }, wall_seconds = { { 1, 1.0 }, { 2, 3.0 } },
        bytes_sent = { { 1, 10 }, { 2, 10 } } },
      { test_accuracy = { { 2, 0.7 } }, wall_seconds = { { 1, 3.0 }, { 2, 1.0 } },
        bytes_sent = { { 1, 10 }, { 2, 10 } } },
      { test_accuracy = { { 2, 0.6 } }, wall_seconds = { { 1, 1.5 }, { 2, 1.5 } },
        bytes_sent = { { 1, 10 }, { 2, 10 } } },
    }))
    assert.are.equal(4.0, run.curve[1][4])          -- the time axis: the slowest node's 4 s by round 2
    assert.are.equal(2.0, run.seconds_per_round)    -- the table: the same node's 4 s over its 2 rounds
  end)

  it("uses simulated seconds when the run has them, and plots accuracy against time", function()
    local dir = fake_run {
      { test_accuracy = { { 1, 0.4 }, { 2, 0.5 } }, wall_seconds = { { 1, 9 }, { 2, 9 } },
        sim_seconds = { { 1, 0.3 }, { 2, 0.6 } }, bytes_sent = { { 1, 10 }, { 2, 10 } } },
      { test_accuracy = { { 1, 0.4 }, { 2, 0.7 } }, wall_seconds = { { 1, 9 }, { 2, 9 } },
        sim_seconds = { { 1, 1.2 }, { 2, 2.4 } }, bytes_sent = { { 1, 10 }, { 2, 10 } } },
    }
    local run = assert(report.load(dir))
    assert.is_true(run.simulated)
    assert.are.equal(1.2, run.curve[1][4])
    assert.are.equal(2.4, run.curve[2][4])
    if os.execute("command -v gnuplot >/dev/null 2>&1") then
      local out = tmpdir()
      local paths = assert(report.plot({ run }, out, "svg"))
      assert.are.equal(3, #paths)
      assert.matches("<svg", read_file(out .. "/report_accuracy_time.svg"))
      assert.matches("simulated seconds", read_file(out .. "/report.gnuplot"))
    end
  end)
end)
