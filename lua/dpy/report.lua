--- dpy.report: comparing runs (dpy-lua report out/A out/B ...). One row per run: config, final
-- test accuracy over the honest evaluated nodes (mean +- std (count); honest as dpy.honest says,
-- as in the run's summary), bytes sent per node per round, epsilon, seconds per round; then a line
-- per run naming the nodes left out. A run is named by its config and overrides (the command that
-- started it), with its seed when runs of one config differ only there. Plots, drawn by gnuplot:
-- the honest nodes' mean test accuracy (a band from their min to their max) against round, against
-- bytes sent per node and against time (the slowest node's: simulated seconds where the run has
-- sim_clock, else its cumulative wall seconds) and against local steps per node (the nodes' own
-- counts, their mean: a centralized run compares with a decentralized one step for step), and their mean
-- test loss against round. A run that did not end as planned (interrupted, diverged, a node's
-- metrics unreadable) is marked on its row and in the legends, and an unreadable metrics file named
-- below the table: its accuracy must not pass for a finished run's.
local metrics = require "dpy.metrics"
local paths = require "dpy.paths"
local host = require "dpy.host.core"

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

local function range(xs)
  local lo, hi
  for _, x in ipairs(xs) do lo, hi = math.min(lo or x, x), math.max(hi or x, x) end
  return lo, hi
end

-- The series the report reads; those of NULLABLE may hold null (a diverged loss, an infinite epsilon).
local SERIES = { "bytes_sent", "epsilon", "sim_seconds", "step", "test_accuracy", "test_loss", "train_loss",
                 "wall_seconds" }
local NULLABLE = { epsilon = true, test_loss = true, train_loss = true }

local function pair_ok(e, nullable)
  return type(e) == "table" and type(e[1]) == "number"
         and (type(e[2]) == "number" or nullable and e[2] == metrics.json.null)
end

-- nil, or what in a node's decoded metrics file is not {"metrics": {"<name>": [[round, number], ...]}}
local function malformed(file, path)
  if type(file) ~= "table" or type(file.metrics) ~= "table" then return path .. ': not {"metrics": {...}}' end
  for _, name in ipairs(SERIES) do
    local series = file.metrics[name]
    if series ~= nil and type(series) ~= "table" then
      return string.format("%s: %s is not a list of [round, number]", path, name)
    end
    for i, e in ipairs(series or {}) do
      if not pair_ok(e, NULLABLE[name]) then
        local ok, shown = pcall(metrics.json.encode, e)
        return string.format("%s: %s[%d] is %s, not [round, number]", path, name, i, ok and shown or tostring(e))
      end
    end
  end
end

-- Node uid's metric series | nil, a warning (no file, or not JSON: a damaged run still reports) |
-- false, an error (a value the report cannot use: the run is refused).
local function node_series(dir, uid)
  local path = string.format("%s/%d.metrics.json", dir, uid)
  local file, err = metrics.read(path)
  if not file then return nil, string.format("node %d's metrics unreadable: %s", uid, err) end
  local bad = malformed(file, path)
  if bad then return false, bad end
  return file.metrics
end

-- Adds to run.marks, for its row and its legend, how the run did not end as planned: interrupted
-- (manifest.json), diverged ({ uid, round } of the nodes, of lossy nodes with a loss), nodes' metrics
-- unreadable (run.warnings, each naming its file, go below the table).
local function mark(run, manifest, cfg, diverged, lossy, reached)
  local stop = manifest.interrupted
  if type(stop) == "table" then
    local round, rounds = math.tointeger(stop.round), math.tointeger(cfg.rounds)   -- nil: not an integer
    local at = round and string.format(" after round %d", round) or ""
    local of = round and rounds and string.format(" of %d", rounds) or ""
    table.insert(run.marks, string.format("interrupted%s%s%s",
                                          type(stop.signal) == "string" and " by " .. stop.signal or "", at, of))
  elseif cfg.nodes and math.tointeger(cfg.rounds) then
    -- no signal, yet nodes short of the last round: a node failed, a process or rank died (or
    -- the run goes on); every node records each round it finishes
    local short, most = {}, 0
    for uid, r in pairs(reached) do
      if r < cfg.rounds then short[#short + 1], most = uid, math.max(most, r) end
    end
    if #short > 0 then
      table.insert(run.marks, string.format("unfinished: %s (round %d of %d at most; see their logs)",
                                            #short == run.nodes and "every node" or require("dpy.pretty").uids(short),
                                            most, cfg.rounds))
    end
  end
  if #diverged > 0 then
    local first, uids = math.huge, {}
    for i, d in ipairs(diverged) do first, uids[i] = math.min(first, d.round), d.uid end
    table.insert(run.marks, #diverged == lossy
                 and string.format("diverged: every node (loss NaN or Inf from round %d)", first)
                 or "diverged: " .. require("dpy.pretty").uids(uids) .. " (loss NaN or Inf)")
  end
  if #run.warnings > 0 then
    table.insert(run.marks, string.format("%d node%s metrics unreadable", #run.warnings,
                                          #run.warnings == 1 and "'s" or "s'"))
  end
end

--- report.load(dir) -> the run's figures | nil, err. run.marks: what the reader must know of a run
-- that did not end as planned (interrupted, diverged, nodes' metrics unreadable); run.warnings: the
-- unreadable metrics files, each with its reason. A value the report cannot use is an error.
function M.load(dir)
  local cfg = metrics.read(dir .. "/config.json")
  if type(cfg) ~= "table" then
    local jobs = {}   -- dispatch --jobs N writes its runs into DIR/job-<i>
    for _, name in ipairs(require("dpy.paths").list(dir) or {}) do
      if name:match("^job%-%d+$") and metrics.read(dir .. "/" .. name .. "/config.json") then jobs[#jobs + 1] = name end
    end
    if #jobs > 0 then
      table.sort(jobs, function(a, b) return tonumber(a:match("%d+")) < tonumber(b:match("%d+")) end)
      return nil, string.format("%s: not a run directory, but the jobs of a dispatch --jobs (%s): dpy-lua report "
                                .. "%s/job-*", dir, table.concat(jobs, ", "), dir:gsub("/+$", ""))
    end
    if not require("dpy.paths").is_dir(dir) then return nil, dir .. ": no such directory" end   -- a typo
    return nil, dir .. ": not a run directory (no readable config.json)"
  end
  local nodes = cfg.nodes == nil and 1 or type(cfg.nodes) == "number" and math.tointeger(cfg.nodes)
  if not nodes or nodes < 1 then
    return nil, string.format("%s/config.json: nodes is %s, not an integer >= 1", dir, tostring(cfg.nodes))
  end
  local manifest = metrics.read(dir .. "/manifest.json") or {}
  if type(manifest) ~= "table" then return nil, dir .. "/manifest.json: not a JSON object" end
  local overrides = {}
  for _, a in ipairs(manifest.command and manifest.command.argv or {}) do
    if type(a) == "string" and a:match("^[%a_][%w_]*=") then overrides[#overrides + 1] = a end
  end
  local run = { dir = dir, label = dir:gsub("/+$", ""):match("([^/]+)$"), name = cfg.name, seed = cfg.seed,
                build = type(manifest.build) == "string" and manifest.build or nil,
                title = table.concat({ cfg.name or "?", table.unpack(overrides) }, " "),
                nodes = nodes, accuracy = {}, curve = {}, bytes_curve = {}, marks = {}, warnings = {} }
  local honest, err = require("dpy.honest").of_run(dir, run.nodes)
  if not honest then return nil, err end
  run.honest_nodes = honest
  local finals, sent, eps, slowest = {}, {}, nil, nil
  local per_round_acc, per_round_bytes, per_round_loss, time_at, steps_at = {}, {}, {}, {}, {}
  run.simulated = false
  -- bytes are a participating node's: a server's (FedAvg, ps) are left out, as in the run's summary
  local ok, server = pcall(function() return require("dpy.container").has_server(cfg) and 0 or nil end)
  server = ok and server or nil
  local diverged, lossy = {}, 0   -- nodes whose loss went NaN or Inf ({ uid, round }), nodes with a loss
  local reached = {}   -- uid -> the last round its metrics record
  for uid = 0, run.nodes - 1 do
    local m, problem = node_series(dir, uid)
    if m == false then return nil, problem end
    if problem then table.insert(run.warnings, "warning: " .. problem) end
    if m then
      if #(m.train_loss or {}) + #(m.test_loss or {}) > 0 then lossy = lossy + 1 end
      local at = metrics.diverged_at(m)
      if at then diverged[#diverged + 1] = { uid = uid, round = at } end
      if uid == server then
        local total = 0
        for _, e in ipairs(m.bytes_sent or {}) do total = total + e[2] end
        run.server_bytes_per_round = #(m.bytes_sent or {}) > 0 and total / #m.bytes_sent or nil
      end
      local cumulative = 0
      for _, e in ipairs(uid ~= server and m.bytes_sent or {}) do
        cumulative = cumulative + e[2]
        per_round_bytes[e[1]] = per_round_bytes[e[1]] or {}
        table.insert(per_round_bytes[e[1]], cumulative)
        sent[#sent + 1] = e[2]
      end
      -- (metrics without the series, not a run's own, say nothing of rounds; a node that failed in its
      -- first round has round 0's ready_seconds alone)
      if m.wall_seconds or m.ready_seconds then
        reached[uid] = 0
        for _, e in ipairs(m.wall_seconds or {}) do reached[uid] = math.max(reached[uid], e[1]) end
      end
      local elapsed = 0
      for _, e in ipairs(m.wall_seconds or {}) do
        elapsed = elapsed + e[2]
        if not m.sim_seconds then time_at[e[1]] = math.max(time_at[e[1]] or 0, elapsed) end
      end
      -- the node's own seconds per round: a round's wait falls on one node, then on another, so
      -- each round's slowest node would add up to more time than the run took
      if m.wall_seconds and #m.wall_seconds > 0 then
        slowest = math.max(slowest or 0, elapsed / #m.wall_seconds)
      end
      for _, e in ipairs(uid ~= server and m.step or {}) do   -- a node's local steps so far (a server has none)
        steps_at[e[1]] = steps_at[e[1]] or {}
        table.insert(steps_at[e[1]], e[2])
      end
      for _, e in ipairs(m.sim_seconds or {}) do
        run.simulated = true
        time_at[e[1]] = math.max(time_at[e[1]] or 0, e[2])
      end
      local spent = last(m.epsilon)
      if spent ~= nil then   -- null: Inf, no guarantee (never '-', a run without DP, nor another node's)
        eps = math.max(eps or 0, spent == metrics.json.null and math.huge or spent)
      end
      if honest.set[uid] and m.test_accuracy and #m.test_accuracy > 0 then
        finals[#finals + 1] = last(m.test_accuracy)
        for _, e in ipairs(m.test_accuracy) do
          local r = e[1]
          per_round_acc[r] = per_round_acc[r] or {}
          table.insert(per_round_acc[r], e[2])
        end
        for _, e in ipairs(m.test_loss or {}) do
          if type(e[2]) == "number" then   -- a diverged loss is null
            per_round_loss[e[1]] = per_round_loss[e[1]] or {}
            table.insert(per_round_loss[e[1]], e[2])
          end
        end
      end
    end
  end
  mark(run, manifest, cfg, diverged, lossy, reached)
  run.accuracy_mean, run.accuracy_std = mean_std(finals)
  run.honest = #finals
  run.bytes_per_round = mean_std(sent)
  run.epsilon = eps
  run.seconds_per_round = slowest
  local rs = {}
  for r in pairs(per_round_acc) do rs[#rs + 1] = r end
  table.sort(rs)
  -- local steps per node by a round: the mean of the nodes' own counts; where they recorded none
  -- (runs written before they did), rounds x local_steps, unknown where local_epochs set the steps
  local per_round_steps = not cfg.local_epochs and math.tointeger(cfg.local_steps) or nil
  for _, r in ipairs(rs) do   -- round, accuracy (mean), bytes, seconds, accuracy min, max, loss mean, min, max,
                              -- local steps
    local acc = mean_std(per_round_acc[r])
    local lo, hi = range(per_round_acc[r])
    local losses = per_round_loss[r] or {}
    local loss_lo, loss_hi = range(losses)
    run.curve[#run.curve + 1] = { r, acc, (mean_std(per_round_bytes[r] or {})) or 0, time_at[r] or 0, lo, hi,
                                  (mean_std(losses)), loss_lo, loss_hi,
                                  steps_at[r] and (mean_std(steps_at[r]))
                                    or (per_round_steps and r * per_round_steps) }
  end
  return run
end

--- report.seeds(runs) -> the groups of runs of one config and overrides with different seeds, each
-- as a run of its own for the table and plots: title "<config> (k seeds)", accuracy mean +- std
-- over the seeds (each seed's honest mean), and a curve of the seeds' mean per round with a band
-- from the lowest seed to the highest (rounds that every seed evaluated). Call before report.name.
function M.seeds(runs)
  local order, by = {}, {}
  for _, run in ipairs(runs) do
    if not by[run.title] then
      by[run.title] = {}
      order[#order + 1] = run.title
    end
    table.insert(by[run.title], run)
  end
  local groups = {}
  for _, title in ipairs(order) do
    local members, seeds = by[title], {}
    for _, run in ipairs(members) do seeds[run.seed or 0] = true end
    local distinct = 0
    for _ in pairs(seeds) do distinct = distinct + 1 end
    if #members > 1 and distinct == #members then
      local finals, bytes, secs, at, eps = {}, {}, {}, {}, nil
      for _, run in ipairs(members) do
        finals[#finals + 1] = run.accuracy_mean
        if run.epsilon then eps = math.max(eps or 0, run.epsilon) end   -- the largest, as over a run's nodes
        bytes[#bytes + 1], secs[#secs + 1] = run.bytes_per_round, run.seconds_per_round
        for _, p in ipairs(run.curve) do
          at[p[1]] = at[p[1]] or {}
          table.insert(at[p[1]], p)
        end
      end
      local g = { label = "seeds", title = string.format("%s (%d seeds)", title, #members), seed = "",
                  honest = #finals, curve = {}, honest_nodes = members[1].honest_nodes, group = true, marks = {},
                  warnings = {}, epsilon = eps }
      for _, run in ipairs(members) do   -- a seed that did not end as planned marks the group too
        for _, m in ipairs(run.marks) do table.insert(g.marks, run.label .. ": " .. m) end
      end
      g.accuracy_mean, g.accuracy_std = mean_std(finals)
      g.bytes_per_round, g.seconds_per_round = mean_std(bytes), mean_std(secs)
      local rounds = {}
      for r, ps in pairs(at) do if #ps == #members then rounds[#rounds + 1] = r end end
      table.sort(rounds)
      for _, r in ipairs(rounds) do
        local col = function(i)
          local xs = {}
          for _, p in ipairs(at[r]) do xs[#xs + 1] = p[i] end
          return xs
        end
        local acc, loss = col(2), col(7)
        local lo, hi = range(acc)
        local loss_lo, loss_hi = range(loss)
        g.curve[#g.curve + 1] = { r, (mean_std(acc)), (mean_std(col(3))), (mean_std(col(4))), lo, hi,
                                  (mean_std(loss)), loss_lo, loss_hi, at[r][1][10] }
      end
      groups[#groups + 1] = g
    end
  end
  return groups
end

--- report.name(runs): each run's legend and table name (run.title): its config and overrides,
-- with seed=N where runs of one config differ by seed, and the directory (as given) where even
-- that is equal.
function M.name(runs)
  local count = {}
  for _, run in ipairs(runs) do count[run.title] = (count[run.title] or 0) + 1 end
  for _, run in ipairs(runs) do
    if count[run.title] > 1 then run.title = run.title .. " seed=" .. string.format("%.0f", run.seed or 0) end
  end
  count = {}
  for _, run in ipairs(runs) do count[run.title] = (count[run.title] or 0) + 1 end
  for _, run in ipairs(runs) do
    if count[run.title] > 1 then run.title = run.title .. " (" .. run.dir .. ")" end
  end
end

local function fmt(v, pattern) return v and string.format(pattern, v) or "-" end

local function marks_of(run) return table.concat(run.marks or {}, "; ") end

--- report.table(runs) -> the text table; a last column, notes, where a run did not end as planned
function M.table(runs)
  local rows = { { "run", "config", "accuracy (honest nodes)", "MB sent/node/round", "epsilon", "s/round" } }
  local noted = false
  for _, run in ipairs(runs) do
    rows[#rows + 1] = {
      run.label, run.title,
      -- one evaluated node (a centralized run, a server) has no spread: no std, rather than a 0 read as one
      run.accuracy_mean and string.format("%.4f%s (%d%s)", run.accuracy_mean,
                                          run.honest > 1 and string.format(" +- %.4f", run.accuracy_std) or "",
                                          run.honest, run.group and " seeds" or "") or "-",
      fmt(run.bytes_per_round and run.bytes_per_round / 1e6, "%.4f"), fmt(run.epsilon, "%.3f"),
      fmt(run.seconds_per_round, "%.3f"), marks_of(run),
    }
    noted = noted or marks_of(run) ~= ""
  end
  if noted then rows[1][#rows[1] + 1] = "notes" else
    for _, row in ipairs(rows) do row[7] = nil end
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
    if not run.group then
      lines[#lines + 1] = run.label .. ": " .. require("dpy.honest").describe(run.honest_nodes)
                          .. (run.server_bytes_per_round and string.format("; the server sent %.4f MB/round",
                                                                           run.server_bytes_per_round / 1e6) or "")
      for _, w in ipairs(run.warnings or {}) do lines[#lines + 1] = run.label .. ": " .. w end
    end
  end
  local builds, order = {}, {}   -- runs of several builds: a difference may be the build's (manifest.json)
  for _, run in ipairs(runs) do
    if not run.group then
      local b = run.build and "build " .. run.build or "build not recorded"
      if not builds[b] then builds[b], order[#order + 1] = {}, b end
      table.insert(builds[b], run.label)
    end
  end
  if #order > 1 then
    for i, b in ipairs(order) do order[i] = b .. " (" .. table.concat(builds[b], ", ") .. ")" end
    lines[#lines + 1] = string.format("these runs come from %d builds of dpy-lua, whose numbers may differ: %s",
                                      #order, table.concat(order, "; "))
  end
  return table.concat(lines, "\n")
end

local function quote(s) return "'" .. s:gsub("'", "''") .. "'" end   -- a gnuplot string

-- A gnuplot string of s cut at spaces into lines of at most width characters (a longer word whole):
-- a title or legend of many overrides ran past the figure's edge, cut off there.
local function wrapped(s, width)
  local lines, line = {}, nil
  for word in s:gmatch("%S+") do
    if line and #line + 1 + #word > width then
      lines[#lines + 1], line = quote(line), word
    else
      line = line and line .. " " .. word or word
    end
  end
  lines[#lines + 1] = quote(line or "")
  return table.concat(lines, '."\\n".')
end

-- Tic steps of 1, 2, 5, 10 ... rounds: never a fraction of a round on the axis.
local function round_tics(runs)
  local hi = 1
  for _, run in ipairs(runs) do
    for _, p in ipairs(run.curve) do hi = math.max(hi, p[1]) end
  end
  local step = 1
  while hi / step > 10 do step = step * (tostring(step):sub(1, 1) == "2" and 2.5 or 2) end
  return math.max(1, math.floor(step + 0.5))
end

-- An x range around the single x value every run has (gnuplot refuses an empty range), or nil.
local function single_x(runs, col)
  local x
  for _, run in ipairs(runs) do
    for _, p in ipairs(run.curve) do
      if x and p[col] ~= x then return nil end
      x = p[col]
    end
  end
  if not x then return nil end
  local pad = math.max(math.abs(x) * 0.5, 1)
  return string.format("set xrange [%g:%g]", x - pad, x + pad)
end

--- report.plot(runs, out_dir, format) -> the plot paths | nil, err. Writes one data file per run
-- and a gnuplot script beside the plots (absolute paths: it runs from anywhere), then runs gnuplot;
-- its own messages are shown only when it fails.
function M.plot(runs, out_dir, format)
  out_dir = paths.absolute(out_dir)
  local terminal = format == "png" and "pngcairo size 900,600" or "svg size 900,600 dynamic"
  local data = {}
  for i, run in ipairs(runs) do
    local path = string.format("%s/report_%d_%s.dat", out_dir, i, run.label:gsub("[^%w_.-]", "_"))
    local lines = { "# round\taccuracy\tbytes_sent_per_node\tseconds\taccuracy_min\taccuracy_max\tloss\tloss_min"
                    .. "\tloss_max\tlocal_steps\n" }
    for _, p in ipairs(run.curve) do
      local function num(v) return v and string.format("%.6f", v) or "NaN" end
      lines[#lines + 1] = string.format("%d\t%.6f\t%.0f\t%.6f\t%s\t%s\t%s\t%s\t%s\t%s\n", p[1], p[2], p[3], p[4],
                                        num(p[5]), num(p[6]), num(p[7]), num(p[8]), num(p[9]),
                                        p[10] and string.format("%.10g", p[10]) or "NaN")   -- a mean: maybe x.5
    end
    local ok, err = host.write_atomic(path, table.concat(lines))   -- a full disk is an error, not a short file
    if not ok then return nil, err end
    data[i] = path
  end
  local simulated, wall = 0, 0
  for _, run in ipairs(runs) do
    if run.simulated then simulated = simulated + 1 else wall = wall + 1 end
  end
  local names = {}
  for i, run in ipairs(runs) do names[i] = run.title or run.label end
  local compared = #runs == 1 and names[1] or table.concat(names, " vs ")
  local plots = {
    { name = "accuracy_round", x = 1, y = 2, band = { 5, 6 }, xlabel = "round", ylabel = "test accuracy" },
    { name = "accuracy_bytes", x = 3, y = 2, band = { 5, 6 }, ylabel = "test accuracy",
      xlabel = "bytes sent per node (k, M, G: 10^3, 10^6, 10^9)" },
    { name = "accuracy_time", x = 4, y = 2, band = { 5, 6 },
      xlabel = wall == 0 and "simulated seconds" or simulated == 0 and "wall seconds"
               or "seconds (simulated for the runs with sim_clock, else wall)", ylabel = "test accuracy" },
    { name = "accuracy_steps", x = 10, y = 2, band = { 5, 6 }, xlabel = "local steps per node",
      ylabel = "test accuracy" },
    { name = "loss_round", x = 1, y = 7, band = { 8, 9 }, xlabel = "round", ylabel = "test loss" },
  }
  local script, outputs = { "set terminal " .. terminal, "set termoption noenhanced", "set key bottom right",
                            "set grid", "set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05" }, {}
  for _, p in ipairs(plots) do
    local series = {}
    for i, run in ipairs(runs) do
      local has = false   -- a run without this figure (no test loss, say) is left out of its plot
      for _, point in ipairs(run.curve) do has = has or (point[p.y] ~= nil and point[p.x] ~= nil) end
      if has then
        series[#series + 1] = string.format("%s using %d:%d:%d with filledcurves fs transparent solid 0.15 "
                                            .. "lc %d notitle", quote(data[i]), p.x, p.band[1], p.band[2], i)
        local legend = names[i] .. (marks_of(run) ~= "" and " [" .. marks_of(run) .. "]" or "")
        series[#series + 1] = string.format("%s using %d:%d with linespoints lc %d pt 7 title %s",
                                            quote(data[i]), p.x, p.y, i, wrapped(legend, 80))
      end
    end
    if #series > 0 then
      local out = string.format("%s/report_%s.%s", out_dir, p.name, format)
      outputs[#outputs + 1] = out
      for _, line in ipairs {
        "set output " .. quote(out),
        "set title " .. wrapped(p.ylabel .. " (honest nodes: mean, band from min to max): " .. compared, 110),
        "set xlabel " .. quote(p.xlabel), "set ylabel " .. quote(p.ylabel),
        p.x == 1 and "set xtics " .. round_tics(runs) or "set xtics autofreq",
        p.x == 3 and "set format x '%.1s%c'" or "set format x '%g'",
        single_x(runs, p.x) or "set autoscale x",
        p.y == 7 and "set key top right" or "set key bottom right",
        "plot " .. table.concat(series, ", "),
      } do script[#script + 1] = line end
    end
  end
  local gp = out_dir .. "/report.gnuplot"
  local wrote, err = host.write_atomic(gp, table.concat(script, "\n") .. "\n")
  if not wrote then return nil, err end
  local log = out_dir .. "/report.gnuplot.log"
  local ok, _, code = os.execute(string.format("gnuplot %s >%s 2>&1", paths.shell_quote(gp), paths.shell_quote(log)))
  if not ok then
    local f2 = io.open(log)
    local said = f2 and f2:read("a") or ""
    if f2 then f2:close() end
    return nil, string.format("gnuplot failed (exit %s)%s; is it installed? (apt-get install gnuplot-nox)",
                              tostring(code), said ~= "" and ": " .. said:gsub("%s+$", "") or "")
  end
  os.remove(log)
  -- gnuplot says nothing of a full disk (exit 0, its plots cut short or empty): is there room left?
  local probe = out_dir .. "/.report.probe"
  local room, why = host.write_atomic(probe, "\n")
  os.remove(probe)
  if not room then return nil, "the plots may be cut short: " .. why end
  for _, out in ipairs(outputs) do
    local f = io.open(out, "rb")
    local size = f and f:seek("end")
    if f then f:close() end
    if not size or size == 0 then return nil, string.format("gnuplot left %s empty", out) end
  end
  return outputs
end

local function escape(text)
  return (tostring(text):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

--- report.html(runs, plots, out_dir) -> the path of report.html | nil, err: the table and the plots
-- (the paths report.plot gave, side by side) in one page that opens in any browser.
function M.html(runs, plots, out_dir)
  local rows = {}
  for line in M.table(runs):gmatch("[^\n]+") do rows[#rows + 1] = escape(line) end
  local figures = {}
  for _, path in ipairs(plots) do
    local name = path:match("([^/]+)$")
    figures[#figures + 1] = string.format('<figure><img src="%s" alt="%s"><figcaption>%s</figcaption></figure>',
                                          escape(name), escape(name), escape(name))
  end
  local page = table.concat({
    "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
    "<title>dpy-lua report</title>",
    "<style>body{font-family:sans-serif;margin:1.5em}pre{background:#f4f4f4;padding:1em;overflow-x:auto}"
    .. "main{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0;width:calc(50% - 0.5em);min-width:420px}"
    .. "img{width:100%;height:auto}figcaption{font-size:small;color:#555}</style>",
    "</head><body>", "<h1>dpy-lua report</h1>",
    "<pre>" .. table.concat(rows, "\n") .. "</pre>",
    "<main>" .. table.concat(figures, "\n") .. "</main>", "</body></html>", "" }, "\n")
  local path = paths.absolute(out_dir) .. "/report.html"
  local ok, err = host.write_atomic(path, page)
  if not ok then return nil, err end
  return path
end

return M
