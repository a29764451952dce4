-- dpy-lua report: runs named by config and overrides, bands across the honest nodes, a loss plot,
-- titles, whole rounds on the axis, a single evaluation drawn, output outside the runs.
local report = require "dpy.report"
local metrics = require "dpy.metrics"
local BIN = shell_quote(DPY_BIN)

-- a run directory of two nodes evaluated in rounds 1..#acc (acc[r] = { node 0, node 1 })
local function fake_run(dir, argv, acc, seed)
  assert(require("dpy.host.core").mkdir_p(dir))
  write_file(dir .. "/config.json", metrics.json.encode { name = "c", nodes = 2, seed = seed or 1, local_steps = 5 })
  write_file(dir .. "/manifest.json", metrics.json.encode { command = { argv = argv } })
  for uid = 0, 1 do
    local m = { test_accuracy = {}, test_loss = {}, bytes_sent = {}, wall_seconds = {} }
    for r, a in ipairs(acc) do
      m.test_accuracy[r], m.test_loss[r] = { r, a[uid + 1] }, { r, 1 - a[uid + 1] }
      m.bytes_sent[r], m.wall_seconds[r] = { r, 1000 }, { r, 0.5 }
    end
    write_file(string.format("%s/%d.metrics.json", dir, uid), metrics.json.encode { uid = uid, metrics = m })
  end
  return dir
end

-- Rewrites a fake run's file: edit(t) changes the decoded JSON in place.
local function edit_json(path, edit)
  local t = assert(metrics.read(path))
  edit(t)
  write_file(path, metrics.json.encode(t))
end

describe("dpy-lua report", function()
  -- a title of many overrides was one line, cut off at the figure's edges: runs no longer told apart
  it("wraps a title and legends of many overrides, keeping every override", function()
    local dir = tmpdir()
    local common = { "lr=0.05", "local_steps=10", "batch_size=64", "rounds=3", "graph={\"regular\",d=4}" }
    for _, sharing in ipairs { "average", "median", "trimmed_mean" } do
      fake_run(dir .. "/out/" .. sharing, { "run", "c.lua", "sharing=" .. sharing, table.unpack(common) },
               { { 0.2, 0.4 }, { 0.5, 0.7 }, { 0.6, 0.8 } })
    end
    local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, code, err)
    local gp = read_file(dir .. "/report/report.gnuplot")
    local title = assert(gp:match("\nset title ([^\n]*)\n"))
    local lines = {}
    for line in (title .. '."\\n".'):gmatch("'(.-)'%.\"\\n\"%.") do
      assert.is_true(#line <= 110, line)
      lines[#lines + 1] = line
    end
    assert.is_true(#lines > 1, title)
    local whole = table.concat(lines, " ")
    for _, sharing in ipairs { "average", "median", "trimmed_mean" } do
      assert.matches("c sharing=" .. sharing .. " lr=0.05 local_steps=10 batch_size=64 rounds=3 "
                     .. "graph={\"regular\",d=4}", whole, 1, true)
    end
    -- a legend's too, at 80 characters
    assert.matches("title 'c sharing=average lr=0.05 local_steps=10 batch_size=64 rounds=3'.\"\\n\"."
                   .. "'graph={\"regular\",d=4}'", gp, 1, true)
    assert.matches("<svg", read_file(dir .. "/report/report_accuracy_round.svg"))
  end)

  it("names runs by config and overrides, draws min-max bands, a loss plot, titles and whole rounds", function()
    local dir = tmpdir()
    fake_run(dir .. "/out/a", { "run", "c.lua", "sharing=average" }, { { 0.2, 0.4 }, { 0.5, 0.7 }, { 0.6, 0.8 } })
    fake_run(dir .. "/out/b", { "run", "c.lua", "sharing=median" }, { { 0.1, 0.3 }, { 0.4, 0.6 }, { 0.5, 0.9 } })
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, code, err)
    assert.are.equal("", err)   -- nothing of gnuplot's own
    assert.matches("a%s+c sharing=average%s+0%.7000 %+%- 0%.1414 %(2%)", out)
    assert.matches("b%s+c sharing=median%s+0%.7000 %+%- 0%.2828 %(2%)", out)
    local gp = read_file(dir .. "/report/report.gnuplot")
    assert.matches("set title 'test accuracy %(honest nodes: mean, band from min to max%): c sharing=average vs c "
                   .. "sharing=median'", gp)
    assert.matches("set xtics 1\n", gp)
    assert.matches("filledcurves", gp)
    assert.matches("'" .. dir:gsub("%p", "%%%0") .. "/report/report_1_a%.dat' using 1:5:6", gp)   -- absolute
    assert.matches("title 'c sharing=average'", gp)
    for _, name in ipairs { "accuracy_round", "accuracy_bytes", "accuracy_time", "accuracy_steps", "loss_round" } do
      assert.matches("<svg", read_file(dir .. "/report/report_" .. name .. ".svg"), name)
    end
    assert.matches("set xlabel 'local steps per node'", gp)
    assert.matches("\n3\t0%.700000\t3000\t1%.500000\t0%.600000\t0%.800000\t0%.300000\t0%.200000\t0%.400000\t15\n",
                   read_file(dir .. "/report/report_1_a.dat"))
    -- the page: the table and the four plots, drawn by a real browser (headless chromium)
    local page = read_file(dir .. "/report/report.html")
    assert.matches("<pre>run%s+config.-c sharing=average.-</pre>", page)
    local _, imgs = page:gsub('<img src="report_[%w_]+%.svg"', "")
    assert.are.equal(5, imgs)
    local shot = dir .. "/shot.png"
    code, _, err = sh("timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                      .. "--window-size=1200,1400 --screenshot=" .. shot .. " file://" .. dir .. "/report/report.html")
    assert.are.equal(0, code, err)
    require "dpy.tensor"   -- the tensor methods
    local pixels = assert(require("dpy.data.core").read_images({ shot }, 1, 1400, 1200))
    -- below the table (rows 300-1000): the plots' frames, curves and labels, not a blank or broken image
    local dark = pixels:narrow(2, 300, 700):lt(200):sum():item()
    assert.is_true(dark > 5000, "dark pixels where the plots are: " .. dark)   -- images that failed: 0
    -- the output is not among the runs: the same glob again works
    local again_code, _, again_err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, again_code, again_err)
  end)

  it("puts the runs of one config over several seeds together: mean +- std across seeds, a band", function()
    local dir = tmpdir()
    for seed, a in ipairs { { 0.5, 0.7 }, { 0.7, 0.9 }, { 0.6, 1.0 } } do   -- honest means 0.6, 0.8, 0.8
      fake_run(dir .. "/out/s" .. seed, { "run", "c.lua", "rounds=2" }, { { 0.1, 0.1 }, a }, seed)
    end
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, code, err)
    assert.matches("s2%s+c rounds=2 seed=2%s+0%.8000 %+%- 0%.1414 %(2%)", out)
    -- mean of 0.6, 0.8, 0.8 and its sample std
    assert.matches("seeds%s+c rounds=2 %(3 seeds%)%s+0%.7333 %+%- 0%.1155 %(3 seeds%)", out)
    assert.matches("title 'c rounds=2 %(3 seeds%)'", read_file(dir .. "/report/report.gnuplot"))
    assert.matches("\n2\t0%.733333\t2000\t1%.000000\t0%.600000\t0%.800000\t",
                   read_file(dir .. "/report/report_4_seeds.dat"))
  end)

  -- a run of last month's build beside today's: a difference may be the build's, not the config's
  it("says when the runs come from more than one build of dpy-lua, naming which", function()
    local dir = tmpdir()
    for i, build in ipairs { "aaaa000000000001", "aaaa000000000001", "bbbb000000000002", false } do
      local run = fake_run(string.format("%s/out/r%d", dir, i), { "run", "c.lua", "rounds=" .. i }, { { 0.5, 0.7 } })
      edit_json(run .. "/manifest.json", function(m) m.build = build or nil end)
    end
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report out/r1 out/r2")
    assert.are.equal(0, code, err)
    assert.not_matches("builds", out)
    code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, code, err)
    assert.matches("these runs come from 3 builds of dpy-lua, whose numbers may differ: build aaaa000000000001 "
                   .. "(r1, r2); build bbbb000000000002 (r3); build not recorded (r4)", out, 1, true)
  end)

  -- one evaluated node (a centralized run, a server, eval_nodes = 1) has no spread to give: it said +- 0.0000
  it("gives no std for a run of one evaluated node", function()
    local dir = tmpdir()
    local run = fake_run(dir .. "/out/one", { "run", "c.lua" }, { { 0.5, 0.7 } })
    edit_json(run .. "/1.metrics.json", function(m) m.metrics.test_accuracy, m.metrics.test_loss = nil, nil end)
    local t = report.table { assert(report.load(run)) }
    assert.matches("\none%s+c%s+0%.5000 %(1%)%s+0%.0010", t)
    assert.not_matches("%+%-", t)
  end)

  it("gives a seeds row of private runs their epsilon, the largest: '-' says a run without DP", function()
    local dir = tmpdir()
    local runs = {}
    for seed, eps in ipairs { 2.5, 3.25 } do
      local run = fake_run(dir .. "/out/s" .. seed, { "run", "c.lua" }, { { 0.5, 0.7 } }, seed)
      for uid = 0, 1 do
        edit_json(string.format("%s/%d.metrics.json", run, uid), function(m) m.metrics.epsilon = { { 1, eps } } end)
      end
      runs[seed] = assert(report.load(run))
    end
    local groups = report.seeds(runs)
    assert.are.equal(1, #groups)
    assert.are.equal(3.25, groups[1].epsilon)
    assert.matches("seeds%s+c %(2 seeds%)%s+0%.6000 %+%- 0%.0000 %(2 seeds%)%s+0%.0010%s+3%.250", report.table(groups))
    -- a node whose epsilon is infinite (null in its file): no guarantee, never '-' nor another node's
    edit_json(dir .. "/out/s1/1.metrics.json", function(m) m.metrics.epsilon = { { 1, metrics.json.null } } end)
    local run = assert(report.load(dir .. "/out/s1"))
    assert.are.equal(math.huge, run.epsilon)
    assert.matches("s1%s+c%s+0%.6000 %+%- 0%.1414 %(2%)%s+0%.0010%s+inf", report.table { run })
  end)

  it("counts a participating node's bytes: a FedAvg server's are left out", function()
    local dir = tmpdir()
    fake_run(dir .. "/fl", { "run", "c.lua" }, { { 0.5, 0.5 } })
    local cfg = metrics.read(dir .. "/fl/config.json")
    cfg.algorithm = "fedavg"
    write_file(dir .. "/fl/config.json", metrics.json.encode(cfg))
    local m = metrics.read(dir .. "/fl/0.metrics.json")   -- the server sends 10x what a client sends
    m.metrics.bytes_sent = { { 1, 10000 } }
    write_file(dir .. "/fl/0.metrics.json", metrics.json.encode(m))
    local run = assert(report.load(dir .. "/fl"))
    assert.are.equal(1000, run.bytes_per_round)
    assert.are.equal(1000, run.curve[1][3])
    assert.matches("0%.0010", report.table { run })
    assert.matches("fl: honest nodes: [^\n]*; the server sent 0%.0100 MB/round", report.table { run })
  end)

  it("draws the local steps the nodes recorded, never rounds x local_steps where local_epochs set them", function()
    local dir = tmpdir()
    -- local_epochs = 1: each node ran an epoch of its own shard a round, whatever local_steps says
    local epochs = fake_run(dir .. "/epochs", { "run", "c.lua", "local_epochs=1" }, { { 0.5, 0.5 }, { 0.6, 0.6 } })
    edit_json(epochs .. "/config.json", function(c) c.local_epochs = 1 end)
    local run = assert(report.load(epochs))
    assert.is_nil(run.curve[2][10])   -- unknown (a run written before nodes recorded their steps)
    for uid, per in pairs { [0] = 40, [1] = 60 } do   -- the nodes' own counts: shards of 40 and 60 batches
      edit_json(string.format("%s/%d.metrics.json", epochs, uid), function(m)
        m.metrics.step = { { 1, per }, { 2, 2 * per } }
      end)
    end
    run = assert(report.load(epochs))
    assert.are.equal(50, run.curve[1][10])   -- their mean
    assert.are.equal(100, run.curve[2][10])
  end)

  it("marks an interrupted run and a diverged one in the table, the plots' legends and the page", function()
    local dir = tmpdir()
    local acc = { { 0.2, 0.4 }, { 0.5, 0.7 }, { 0.6, 0.8 } }   -- rounds 1-3 of 5
    local cut = fake_run(dir .. "/out/cut", { "run", "c.lua", "rounds=5" }, acc)
    edit_json(cut .. "/config.json", function(c) c.rounds = 5 end)
    edit_json(cut .. "/manifest.json", function(m) m.interrupted = { signal = "SIGINT", round = 3 } end)
    local nan = fake_run(dir .. "/out/nan", { "run", "c.lua", "lr=10" }, { { 0.1, 0.1 }, { 0.1, 0.1 } })
    for uid = 0, 1 do   -- every node's loss NaN from round 2 (written as null)
      edit_json(string.format("%s/%d.metrics.json", nan, uid), function(m) m.metrics.test_loss[2][2] = 0 / 0 end)
    end
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, code, err)
    assert.matches("\ncut%s+c rounds=5%s+0%.7000 %+%- 0%.1414 %(2%)[^\n]*interrupted by SIGINT after round 3 of 5", out)
    assert.matches("\nnan%s+c lr=10%s+[^\n]*diverged: every node %(loss NaN or Inf from round 2%)", out)
    local gp = read_file(dir .. "/report/report.gnuplot")
    assert.matches("title 'c rounds=5 %[interrupted by SIGINT after round 3 of 5%]'", gp)
    assert.matches("title 'c lr=10 %[diverged: every node %(loss NaN or Inf from round 2%)%]'", gp)
    assert.matches("interrupted by SIGINT after round 3 of 5", read_file(dir .. "/report/report.html"))
  end)

  it("marks a run whose nodes stopped before its last round without a signal (a node failed, a rank died)", function()
    local dir = tmpdir()
    local acc = { { 0.2, 0.4 }, { 0.5, 0.7 }, { 0.6, 0.8 } }   -- rounds 1-3 of 5
    local failed = fake_run(dir .. "/out/failed", { "run", "c.lua", "rounds=5" }, acc)
    edit_json(failed .. "/config.json", function(c) c.rounds = 5 end)
    local one = fake_run(dir .. "/out/one", { "run", "c.lua", "rounds=3" }, acc)
    edit_json(one .. "/config.json", function(c) c.rounds = 3 end)
    edit_json(one .. "/1.metrics.json", function(m)   -- node 1 stopped after round 2
      for _, k in ipairs { "test_accuracy", "test_loss", "bytes_sent", "wall_seconds" } do m.metrics[k][3] = nil end
    end)
    local done = fake_run(dir .. "/out/done", { "run", "c.lua", "rounds=3" }, acc)
    edit_json(done .. "/config.json", function(c) c.rounds = 3 end)
    -- every node failed in round 1: their metrics hold round 0's ready_seconds alone
    local early = fake_run(dir .. "/out/early", { "run", "c.lua", "rounds=3" }, acc)
    edit_json(early .. "/config.json", function(c) c.rounds = 3 end)
    for uid = 0, 1 do
      edit_json(string.format("%s/%d.metrics.json", early, uid),
                function(m) m.metrics = { ready_seconds = { { 0, 0.7 } } } end)
    end
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report out/*")
    assert.are.equal(0, code, err)
    assert.matches("\nearly%s+c rounds=3%s+[^\n]*unfinished: every node %(round 0 of 3 at most; see their logs%)", out)
    assert.matches("\nfailed%s+c rounds=5%s+[^\n]*unfinished: every node %(round 3 of 5 at most; see their logs%)", out)
    assert.matches("\none%s+c rounds=3%s+[^\n]*unfinished: node 1 %(round 2 of 3 at most; see their logs%)", out)
    assert.not_matches("\ndone[^\n]*unfinished", out)
    assert.matches("title 'c rounds=5 %[unfinished: every node", read_file(dir .. "/report/report.gnuplot"))
  end)

  it("names the jobs of a dispatch --jobs directory given in their place", function()
    local dir = tmpdir()
    fake_run(dir .. "/jobs/job-1", { "dispatch", "c.lua" }, { { 0.5, 0.7 } }, 1)
    fake_run(dir .. "/jobs/job-2", { "dispatch", "c.lua" }, { { 0.5, 0.7 } }, 2)
    local run, err = report.load(dir .. "/jobs")
    assert.is_nil(run)
    assert.matches("jobs: not a run directory, but the jobs of a dispatch %-%-jobs %(job%-1, job%-2%): "
                   .. "dpy%-lua report .*jobs/job%-%*", err)
    -- a path that names nothing (a typo) says so, not that a config.json is missing
    run, err = report.load(dir .. "/jbos")
    assert.is_nil(run)
    assert.matches("jbos: no such directory$", err)
  end)

  it("warns of a node whose metrics are unreadable, naming the file", function()
    local dir = tmpdir()
    local run_dir = fake_run(dir .. "/r", { "run", "c.lua" }, { { 0.5, 0.7 } })
    local path = run_dir .. "/1.metrics.json"
    write_file(path, read_file(path):sub(1, 20))   -- truncated
    local run = assert(report.load(run_dir))
    local text = report.table { run }
    assert.matches("0%.5000 %(1%)[^\n]*1 node's metrics unreadable", text)
    assert.matches("r: warning: node 1's metrics unreadable: " .. path:gsub("%p", "%%%0") .. ": .", text)
  end)

  it("fails on a full disk, naming it, instead of listing empty plots and an empty page", function()
    local dir = tmpdir()
    local run_dir = fake_run(dir .. "/r", { "run", "c.lua" }, { { 0.5, 0.7 }, { 0.6, 0.8 }, { 0.7, 0.9 } })
    local small = dir .. "/small"
    assert(require("dpy.host.core").mkdir_p(small))
    for _, size in ipairs { "8k", "24k", "40k" } do   -- full at the data, the plots, the page
      if sh("mount -t tmpfs -o size=" .. size .. " tmpfs " .. small) ~= 0 then   -- the suite's setup runs as root
        pending("mounting a small tmpfs needs root")
        return
      end
      local code, out, err = sh(BIN .. " report " .. run_dir .. " --out " .. small .. "/rep")
      sh("umount -l " .. small)
      assert.are.equal(1, code, size .. ": " .. out .. err)
      assert.matches("No space left on device", err, size)
      assert.not_matches("page: ", out, size)
    end
  end)

  it("refuses a metrics file with a malformed value, naming the file, without a traceback", function()
    local dir = tmpdir()
    local run_dir = fake_run(dir .. "/r", { "run", "c.lua" }, { { 0.5, 0.7 }, { 0.6, 0.8 } })
    edit_json(run_dir .. "/1.metrics.json", function(m) m.metrics.bytes_sent[2][2] = "lots" end)
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " report r")
    assert.are.equal(1, code, out)
    assert.are.equal("dpy-lua report: r/1.metrics.json: bytes_sent[2] is [2,\"lots\"], not "
                     .. "[round, number]\n", err)
  end)

  it("tells apart runs of one config by seed, and draws a single evaluation", function()
    local dir = tmpdir()
    local runs = { assert(report.load(fake_run(dir .. "/s1", { "run", "c.lua" }, { { 0.5, 0.7 } }, 1))),
                   assert(report.load(fake_run(dir .. "/s2", { "run", "c.lua" }, { { 0.4, 0.6 } }, 2))) }
    report.name(runs)
    assert.are.equal("c seed=1", runs[1].title)
    assert.are.equal("c seed=2", runs[2].title)
    local out = tmpdir()
    assert(report.plot(runs, out, "svg"))
    assert.matches("set xrange %[0:2%]", read_file(out .. "/report.gnuplot"))   -- round 1, with room
    assert.matches("<svg", read_file(out .. "/report_accuracy_round.svg"))
  end)
end)
