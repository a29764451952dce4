-- What a run prints: plain progress lines where stderr is not a terminal, nothing but the summary
-- with -q, one line per distinct failure, and diverged nodes named.
local BIN = shell_quote(DPY_BIN)
local host = require "dpy.host.core"

local function run(config, flags, env)
  local dir = tmpdir()
  write_file(dir .. "/c.lua", config)
  local code, out, err = sh((env or "") .. " " .. BIN .. " run " .. dir .. "/c.lua --out " .. dir .. "/out "
                            .. (flags or ""))
  return code, out, err, dir .. "/out"
end

describe("a run's output #e2e", function()
  it("has plain progress lines when stderr is not a terminal, with the live line's fields", function()
    local code, out, err = run(TINY_RUN, "", "DPY_PROGRESS_SECONDS=0")
    assert.are.equal(0, code, err)
    assert.matches("round 3/3  mean test accuracy %d%.%d+  [%d.]+ MB exchanged per node  ETA", err)
    assert.is_nil(err:find("\r", 1, true))
    assert.matches("results in", out)
  end)

  it("counts the progress line's MB as the summary does: per client, a server's apart", function()
    for _, processes in ipairs { 1, 2 } do   -- a server's bytes made the line's figure half again the summary's
      local code, out, err = run(TINY_RUN .. "algorithm = 'fedavg'\nprocesses = " .. processes .. "\n", "",
                                 "DPY_PROGRESS_SECONDS=0")
      assert.are.equal(0, code, err)
      local line
      for mb in err:gmatch("round 3/3  [^\n]-  ([%d.]+) MB exchanged per client  ETA") do line = mb end
      assert.truthy(line, err)
      assert.are.equal(out:match("([%d.]+) MB exchanged per client"), line, out .. err)
    end
  end)

  it("prints only the summary with -q", function()
    local code, out, err = run(TINY_RUN, "-q", "DPY_PROGRESS_SECONDS=0")
    assert.are.equal(0, code, err)
    assert.are.equal("", err)
    assert.matches("^results in", out)
  end)

  it("names each distinct failure once, with the nodes that failed that way", function()
    local code, _, err = run(TINY_RUN .. action_config("boom", "post_train", "error('boom at round ' .. r)"))
    assert.are.equal(1, code)
    local _, lines = err:gsub("failed: [^\n]*boom at round 1", "")
    assert.are.equal(1, lines, err)
    assert.matches("dpy%-lua: nodes 0%-3 failed: [^\n]*boom at round 1", err)
  end)

  it("names the nodes whose loss went NaN or Inf, and from which round", function()
    local nan = "if node.uid == 1 and r == 3 then local f <close> = node.model:get_flat(); f:fill_(0 / 0); "
                .. "node.model:set_flat(f) end"
    local code, out, err = run(TINY_RUN .. action_config("nan", "post_exchange", nan))
    assert.are.equal(0, code, err)
    assert.matches("diverged %(loss NaN or Inf%): node 1 from round 3", out)
  end)

  it("counts a FedAvg client's traffic per client, and the server's apart", function()
    local code, out, err, dir = run(TINY_RUN:gsub("nodes = 4", "nodes = 5") .. "algorithm = 'fedavg'\n")
    assert.are.equal(0, code, err)
    local total = {}
    for uid = 0, 4 do
      local m = node_metrics(dir, uid)
      total[uid] = 0
      for _, key in ipairs { "bytes_sent", "bytes_received" } do
        for _, e in ipairs(m[key] or {}) do total[uid] = total[uid] + e[2] end
      end
    end
    local clients = (total[1] + total[2] + total[3] + total[4]) / 2 / 4 / 1e6
    assert.matches(string.format("%.2f MB exchanged per client, %.2f MB by the server", clients, total[0] / 2 / 1e6),
                   out, 1, true)
  end)

  it("records a centralized run's seconds per evaluation interval, as a node records its rounds'", function()
    local code, out, err, dir = run("seed = 3\nbatch_size = 16\nmax_steps = 40\neval_every = 10\n"
                                    .. "train_samples = 2000\ntest_samples = 200\n")
    assert.are.equal(0, code, err)
    local m = node_metrics(dir, 0)
    local sum = 0
    for _, e in ipairs(m.train_seconds) do sum = sum + e[2] end
    -- the summary's total training time is the sum of the intervals (cumulative values would sum to 2.5x)
    local total = tonumber(out:match("%d+ steps %(%d+ samples%) in ([%d.]+) s"))
    assert.are.equal(4, #m.train_seconds)
    assert.is_true(math.abs(sum - total) < 0.06, string.format("%g vs %g", sum, total))
  end)

  it("names a run directory it cannot write, without a source line of its own", function()
    local dir = tmpdir()
    local ro = dir .. "/ro"
    assert(host.mkdir_p(ro))
    if sh("mount -t tmpfs -o size=1m tmpfs " .. ro .. " && mount -o remount,ro " .. ro) ~= 0 then   -- root
      sh("umount " .. ro)
      pending("mounting a read-only tmpfs needs root")
      return
    end
    write_file(dir .. "/c.lua", TINY_RUN)
    local code, _, err = sh(shell_quote(DPY_BIN) .. " run " .. dir .. "/c.lua --out " .. ro .. " -q")
    sh("umount -l " .. ro)
    assert.are.equal(1, code, err)
    assert.matches("run failed: cannot create " .. ro:gsub("%p", "%%%0") .. "/config%.lua%.tmp%.%d+: Read%-only file "
                   .. "system", err)
  end)

  it("exits 1 when every node diverged", function()
    local code, out, err = run(TINY_RUN .. "optimizer = { 'sgd', lr = 1e30 }\n")
    assert.are.equal(1, code, out .. err)
    assert.matches("diverged %(loss NaN or Inf%): nodes 0%-3 from round 1", out)
    assert.matches("every node diverged", err)
  end)
end)

describe("a node's metrics (dpy.metrics)", function()
  local metrics = require "dpy.metrics"
  local cjson = metrics.json

  it("writes each series as [[round, value], ...], what cjson writes of the pairs, odd values too", function()
    local path = tmpdir() .. "/m.json"
    local t = metrics.new(3, path)
    for r = 1, 40 do
      t:add("loss", r, 1 / r)
      t:add("bytes", r, r * 123456789)
      t:add("diverged", r, r % 7 == 0 and 0 / 0 or (r % 5 == 0 and math.huge or -r / 4))
    end
    t:add("ready_seconds", 0, 0.1234567890123)
    t:add("note", 1, "a,b")
    t:add("note", 2, { x = 1, y = { 2, 3 } })
    t:add("gap", 1, nil)
    t:add("gap", 2, 5)
    assert.is_true(t:save())
    local got = cjson.decode(read_file(path))
    local want = cjson.decode(cjson.encode({ uid = 3, metrics = t:export() }))
    assert.are.same(want, got)
    assert.are.same({ 38, -9.5 }, got.metrics.diverged[38])
    assert.are.equal(cjson.null, got.metrics.diverged[7][2])   -- NaN and Inf as null
    assert.are.equal(cjson.null, got.metrics.diverged[5][2])
    assert.are.same({ { 1, "a,b" }, { 2, { x = 1, y = { 2, 3 } } } }, got.metrics.note)
    assert.are.same({ 2, 5 }, { t:last("gap") })
    -- a checkpoint's copy comes back the same
    local back = metrics.new(3, path)
    back:import(got.metrics)
    assert.are.same(got.metrics, back:export())
  end)

  it("holds a long run's series in a few bytes an entry", function()
    collectgarbage()
    local before = collectgarbage("count")
    local t = metrics.new(0, "unused")
    for r = 1, 1000 do
      for _, name in ipairs { "train_loss", "bytes_sent", "bytes_received", "train_seconds", "exchange_seconds",
                              "wall_seconds" } do
        t:add(name, r, r + 0.5)
      end
    end
    collectgarbage()
    local kib = collectgarbage("count") - before
    assert.is_true(kib < 250, kib .. " KiB for 6,000 entries")   -- a table a pair: 670 KiB
  end)
end)

describe("how the REPL shows values (dpy.pretty)", function()
  it("shows a table's own entries whatever its __len says, and a tensor inside it on one line", function()
    local pretty, tensor = require "dpy.pretty", require "dpy.tensor"
    assert.are.equal("{ n = 3 }", pretty.format(setmetatable({ n = 3 }, { __len = function() return 4 end })))
    assert.are.equal('{ 1, 2, k = "v" }', pretty.format({ 1, 2, k = "v" }))
    local big = tensor.zeros(600, 28, 28)
    assert.are.equal("{ a = dpy.Tensor(float32, cpu, [600, 28, 28]) ..., b = 2 }", pretty.format({ a = big, b = 2 }))
    assert.are.equal("{ dpy.Tensor(int64, cpu, [2]) [1, 2] }", pretty.format({ tensor.new { 1, 2 } }))
    assert.matches("^dpy%.Tensor%(float32, cpu, %[600, 28, 28%]%)\n%[%[%[", pretty.format(big))   -- alone: whole
  end)
end)
