--- dpy.report: comparing runs (dpy-lua report out/A out/B ...). One row per run: config, final
-- test accuracy over the honest evaluated nodes (mean +- std (count); honest as dpy.honest says,
-- as in the run's summary), bytes sent per node per round, epsilon, seconds per round; then a line
-- per run naming the nodes left out. Plots, drawn by gnuplot: accuracy against round, against
-- bytes sent per node, and against time (the slowest node's: simulated seconds where the run has
-- sim_clock, else its cumulative wall seconds).
local metrics = require "dpy.metrics"

local M = {}

local function mean_std(xs)
  if #xs == 0 then return nil end
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  local m = s / #xs
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - m) ^ 2 end
  return m, #xs > 1 and math.sqrt(v / (#xs - 1)) or 0
end

local function last(series) return series and series[#series] and series[#series][2] end

--- report.load(dir) -> the run's figures | nil, err
function M.load(dir)
  local cfg = metrics.read(dir .. "/config.json")
  if not cfg then return nil, dir .. ": not a run directory (no readable config.json)" end
  local run = { dir = dir, label = dir:gsub("/+$", ""):match("([^/]+)$"), name = cfg.name,
                nodes = cfg.nodes or 1, accuracy = {}, curve = {}, bytes_curve = {} }
  local honest, err = require("dpy.honest").of_run(dir, run.nodes)
  if not honest then return nil, err end
  run.honest_nodes = honest
  local finals, sent, walls, eps = {}, {}, {}, nil
  local per_round_acc, per_round_bytes, time_at = {}, {}, {}
  run.simulated = false
  for uid = 0, run.nodes - 1 do
    local m = metrics.read(string.format("%s/%d.metrics.json", dir, uid))
    m = m and m.metrics
    if m then
      local cumulative, bytes_at = 0, {}
      for _, e in ipairs(m.bytes_sent or {}) do
        cumulative = cumulative + e[2]
        bytes_at[e[1]] = cumulative
        sent[#sent + 1] = e[2]
      end
      local elapsed = 0
      for _, e in ipairs(m.wall_seconds or {}) do
        walls[e[1]] = math.max(walls[e[1]] or 0, e[2])
        elapsed = elapsed + e[2]
        if not m.sim_seconds then time_at[e[1]] = math.max(time_at[e[1]] or 0, elapsed) end
      end
      for _, e in ipairs(m.sim_seconds or {}) do
        run.simulated = true
        time_at[e[1]] = math.max(time_at[e[1]] or 0, e[2])
      end
      if last(m.epsilon) then eps = math.max(eps or 0, last(m.epsilon)) end
      if honest.set[uid] and m.test_accuracy and #m.test_accuracy > 0 then
        finals[#finals + 1] = last(m.test_accuracy)
        for _, e in ipairs(m.test_accuracy) do
          local r = e[1]
          per_round_acc[r] = per_round_acc[r] or {}
          table.insert(per_round_acc[r], e[2])
          per_round_bytes[r] = per_round_bytes[r] or {}
          table.insert(per_round_bytes[r], bytes_at[r] or 0)
        end
      end
    end
  end
  run.accuracy_mean, run.accuracy_std = mean_std(finals)
  run.honest = #finals
  run.bytes_per_round = mean_std(sent)
  run.epsilon = eps
  local rounds = {}
  for r in pairs(walls) do rounds[#rounds + 1] = r end
  local total = 0
  for _, r in ipairs(rounds) do total = total + walls[r] end
  run.seconds_per_round = #rounds > 0 and total / #rounds or nil
  local rs = {}
  for r in pairs(per_round_acc) do rs[#rs + 1] = r end
  table.sort(rs)
  for _, r in ipairs(rs) do
    local acc = mean_std(per_round_acc[r])
    run.curve[#run.curve + 1] = { r, acc, (mean_std(per_round_bytes[r])), time_at[r] or 0 }
  end
  return run
end

local function fmt(v, pattern) return v and string.format(pattern, v) or "-" end

--- report.table(runs) -> the text table
function M.table(runs)
  local rows = { { "run", "config", "accuracy (honest nodes)", "bytes/node/round", "epsilon", "s/round" } }
  for _, run in ipairs(runs) do
    rows[#rows + 1] = {
      run.label, run.name,
      run.accuracy_mean and string.format("%.4f +- %.4f (%d)", run.accuracy_mean, run.accuracy_std, run.honest) or "-",
      fmt(run.bytes_per_round, "%.0f"), fmt(run.epsilon, "%.3f"), fmt(run.seconds_per_round, "%.3f"),
    }
  end
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do widths[i] = math.max(widths[i] or 0, #cell) end
  end
  local lines = {}
  for _, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do cells[i] = cell .. string.rep(" ", widths[i] - #cell) end
    lines[#lines + 1] = table.concat(cells, "  "):gsub("%s+$", "")
  end
  for _, run in ipairs(runs) do   -- which nodes count, as the run's summary says it
    lines[#lines + 1] = run.label .. ": " .. require("dpy.honest").describe(run.honest_nodes)
  end
  return table.concat(lines, "\n")
end

local function quote(s) return "'" .. s:gsub("'", "''") .. "'" end   -- a gnuplot string

--- report.plot(runs, out_dir, format) -> the plot paths | nil, err. Writes one data file per run
-- (round, accuracy, bytes) and a gnuplot script beside the plots, then runs gnuplot.
function M.plot(runs, out_dir, format)
  local terminal = format == "png" and "pngcairo size 900,600" or "svg size 900,600 dynamic"
  local data = {}
  for i, run in ipairs(runs) do
    local path = string.format("%s/report_%d_%s.dat", out_dir, i, run.label:gsub("[^%w_.-]", "_"))
    local f, err = io.open(path, "w")
    if not f then return nil, err end
    f:write("# round\taccuracy\tbytes_sent_per_node\tseconds\n")
    for _, p in ipairs(run.curve) do f:write(string.format("%d\t%.6f\t%.0f\t%.6f\n", p[1], p[2], p[3], p[4])) end
    f:close()
    data[i] = path
  end
  local simulated, wall = 0, 0
  for _, run in ipairs(runs) do
    if run.simulated then simulated = simulated + 1 else wall = wall + 1 end
  end
  local plots = { accuracy_round = { x = 1, xlabel = "round" },
                  accuracy_bytes = { x = 3, xlabel = "bytes sent per node" },
                  accuracy_time = { x = 4, xlabel = wall == 0 and "simulated seconds"
                                               or simulated == 0 and "wall seconds"
                                               or "seconds (simulated for the runs with sim_clock, else wall)" } }
  local script, outputs = { "set terminal " .. terminal, "set termoption noenhanced",
                            "set key bottom right", "set grid",
                            "set ylabel 'test accuracy (honest nodes, mean)'" }, {}
  for _, name in ipairs { "accuracy_round", "accuracy_bytes", "accuracy_time" } do
    local p = plots[name]
    local out = string.format("%s/report_%s.%s", out_dir, name, format)
    outputs[#outputs + 1] = out
    script[#script + 1] = "set output " .. quote(out)
    script[#script + 1] = "set xlabel " .. quote(p.xlabel)
    if p.x == 3 then script[#script + 1] = "set format x '%.1s%c'" else script[#script + 1] = "set format x '%g'" end
    local series = {}
    for i, run in ipairs(runs) do
      series[i] = string.format("%s using %d:2 with linespoints title %s", quote(data[i]), p.x, quote(run.label))
    end
    script[#script + 1] = "plot " .. table.concat(series, ", ")
  end
  local gp = out_dir .. "/report.gnuplot"
  local f, err = io.open(gp, "w")
  if not f then return nil, err end
  f:write(table.concat(script, "\n"), "\n")
  f:close()
  local ok, _, code = os.execute("gnuplot " .. "'" .. gp:gsub("'", "'\\''") .. "' 2>&1")
  if not ok then
    return nil, string.format("gnuplot failed (exit %s); is it installed? (apt-get install gnuplot-nox)",
                              tostring(code))
  end
  return outputs
end

return M
