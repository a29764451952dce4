--- dpy.launcher: runs a decentralized experiment. The launcher writes the run directory (config,
-- manifest, graph.json, partition.pt), then hosts the nodes: in this process when the config
-- says one process, else in child processes (`dpy-lua node ... --process p`) that reach each
-- other over tcp. It shows a live progress line and ends with a summary table; it fails, naming
-- the node and its error, when any node fails.
local nodes_core = require "dpy.nodes.core"
local host = require "dpy.host.core"
local layout = require "dpy.layout"
local metrics = require "dpy.metrics"
local progress = require "dpy.progress"

local M = {}

local GRACE = 15   -- seconds the other processes get to stop by themselves after a failure

--- Hosts process p's nodes until they finish; calls tick(group) twice a second.
-- Returns { [uid] = true | error message }, or raises when the fabric cannot start.
function M.host_process(cfg, p, opts, tick)
  local uids = layout.uids_of(p, cfg.nodes, cfg.processes)
  local cores = host.versions().threads
  -- one intra-op thread per node: parallelism comes from the nodes (compute slots), and the
  -- same thread count in every layout keeps results bit-identical across layouts
  host.set_threads(cfg.threads or 1)
  local f = cfg.faults or {}
  local group, err = nodes_core.start {
    nodes = cfg.nodes, process = p, processes = cfg.processes,
    node_process = layout.node_process(cfg.nodes, cfg.processes), uids = uids,
    addresses = cfg.processes > 1 and (opts.addresses or layout.addresses(cfg, opts.run_id)) or nil,
    run_id = opts.run_id, max_payload = opts.max_payload or (1 << 30),
    slots = cfg.slots or cores, pin = cfg.pin_slots, connect_timeout = 60, threads = cfg.threads or 1,
    drop = f.drop, duplicate = f.duplicate, corrupt = f.corrupt, delay = f.delay, fault_seed = cfg.seed,
    args = { config = opts.config, dir = opts.dir, seed = tostring(cfg.seed), t0 = tostring(opts.t0 or ""),
             overrides = table.concat(opts.overrides or {}, "\n"),
             resume = opts.resume and tostring(opts.resume) or nil },
  }
  if not group then error("process " .. p .. ": " .. err, 0) end
  while not group:wait(0.5) do
    if tick then tick(group) end
  end
  if tick then tick(group) end
  local results = group:results()
  group:close()
  return results
end

local function failures(results)
  local list = {}
  for uid, r in pairs(results) do
    if r ~= true then list[#list + 1] = { uid = uid, err = r } end
  end
  table.sort(list, function(a, b) return a.uid < b.uid end)
  return list
end

-- Reads every node's metrics; returns the summary table's numbers (accuracy: the honest nodes').
function M.summarize(cfg, dir, seconds)
  local honest = assert(require("dpy.honest").of_run(dir, cfg.nodes))
  local accs, sent, recv, rounds = {}, 0, 0, 0
  for u = 0, cfg.nodes - 1 do
    local m = metrics.read(string.format("%s/%d.metrics.json", dir, u))
    if m then
      local s = m.metrics
      if honest.set[u] and s.test_accuracy and #s.test_accuracy > 0 then
        accs[#accs + 1] = s.test_accuracy[#s.test_accuracy][2]
      end
      for _, e in ipairs(s.bytes_sent or {}) do sent = sent + e[2] end
      for _, e in ipairs(s.bytes_received or {}) do recv = recv + e[2] end
      rounds = math.max(rounds, s.wall_seconds and #s.wall_seconds or 0)
    end
  end
  local sum, lo, hi = 0, math.huge, -math.huge
  for _, a in ipairs(accs) do
    sum, lo, hi = sum + a, math.min(lo, a), math.max(hi, a)
  end
  return { honest = honest, evaluated = #accs, mean = #accs > 0 and sum / #accs or 0 / 0, min = lo, max = hi,
           mb_per_node = (sent + recv) / 2 / cfg.nodes / 2 ^ 20, rounds = rounds,
           seconds_per_round = rounds > 0 and seconds / rounds or 0 / 0 }
end

function M.progress_line(cfg, p, start)
  local done = math.max(p.round, 0)
  local elapsed = host.clock() - start
  local eta = done > 0 and (cfg.rounds - done) * elapsed / done or 0 / 0
  return string.format("round %d/%d  mean test accuracy %s  %.1f MB exchanged  ETA %s", done,
                       cfg.rounds, p.accuracy == p.accuracy and string.format("%.4f", p.accuracy) or "-",
                       p.sent / 2 ^ 20, progress.duration(eta))
end

local function spawn_children(cfg, opts)
  local children = {}
  for p = 0, cfg.processes - 1 do
    local argv = { opts.exe, "node", opts.config, "--process", tostring(p), "--dir", opts.dir,
                   "--run-id", tostring(opts.run_id), "--seed", tostring(cfg.seed),
                   "--t0", string.format("%.6f", opts.t0) }
    if opts.resume then
      argv[#argv + 1] = "--resume"
      argv[#argv + 1] = tostring(opts.resume)
    end
    for _, o in ipairs(opts.overrides or {}) do argv[#argv + 1] = o end
    local pid, err = host.spawn(argv, string.format("%s/process-%d.out", opts.dir, p))
    if not pid then
      for _, c in ipairs(children) do host.kill(c, 15) end
      error("cannot start process " .. p .. ": " .. err, 0)
    end
    children[#children + 1] = pid
  end
  return children
end

-- Progress of child processes, read from the progress-<p>.json files they write.
local function read_progress(cfg, dir)
  local total = { round = math.huge, accuracy = 0 / 0, sent = 0 }
  local acc_sum, acc_n = 0, 0
  for p = 0, cfg.processes - 1 do
    local t = metrics.read(string.format("%s/progress-%d.json", dir, p))
    if not t then return { round = 0, accuracy = 0 / 0, sent = 0 } end
    total.round = math.min(total.round, t.round)
    total.sent = total.sent + t.sent
    if t.accuracy then
      acc_sum, acc_n = acc_sum + t.accuracy * t.count, acc_n + t.count
    end
  end
  if acc_n > 0 then total.accuracy = acc_sum / acc_n end
  return total
end

--- Runs the experiment; opts = { dir, config (path), overrides, exe, quiet, resume = round }.
-- Returns the summary;
-- raises naming the failed nodes.
function M.run(cfg, opts)
  local bar = progress.new()
  local start = host.clock()
  opts.t0 = opts.t0 or start
  local info = layout.prepare(cfg, opts.dir)
  if info.spectral_gap then
    bar:line(string.format("%d nodes, %d edges, spectral gap %.4f", cfg.nodes, info.edges, info.spectral_gap))
  end
  local failed = {}
  if cfg.processes == 1 then
    local results = M.host_process(cfg, 0, opts, function(group)
      bar:update(M.progress_line(cfg, group:progress(), start))
    end)
    failed = failures(results)
  else
    local children = spawn_children(cfg, opts)
    local codes, left, deadline = {}, #children, nil
    while left > 0 do
      for i, pid in ipairs(children) do
        if not codes[i] then
          local code = host.wait(pid, true)
          if code then
            codes[i], left = code, left - 1
            -- the others see the dead peer and stop by themselves (saving what they have);
            -- a grace period, then they are stopped
            if code ~= 0 and cfg.on_peer_failure == "abort" and not deadline then
              deadline = host.clock() + GRACE
            end
          end
        end
      end
      if deadline and host.clock() > deadline then
        for j, other in ipairs(children) do
          if not codes[j] then host.kill(other, 15) end
        end
        deadline = math.huge
      end
      bar:update(M.progress_line(cfg, read_progress(cfg, opts.dir), start))
      if left > 0 then host.sleep(0.2) end
    end
    for i, code in ipairs(codes) do
      if code ~= 0 then
        local out = io.open(string.format("%s/process-%d.out", opts.dir, i - 1))
        local text = out and out:read("a") or ""
        if out then out:close() end
        local any = false
        for uid, err in text:gmatch("node (%d+) failed: ([^\n]*)") do
          failed[#failed + 1] = { uid = tonumber(uid), err = err }
          any = true
        end
        if not any then
          failed[#failed + 1] = { uid = -1, err = string.format("process %d exited with %d: %s", i - 1, code,
                                                                text:match("[^\n]*\n?$") or "") }
        end
      end
    end
  end
  bar:done()
  local seconds = host.clock() - start
  local summary = M.summarize(cfg, opts.dir, seconds)
  summary.failed = failed
  summary.seconds = seconds
  return summary
end

--- `dpy-lua node`: hosts process p's nodes of a run the launcher prepared (or mpirun started),
-- writing progress-<p>.json twice a second. Returns the exit code.
function M.node_main(cfg, opts)
  local p = opts.process
  local path = string.format("%s/progress-%d.json", opts.dir, p)
  local results = M.host_process(cfg, p, opts, function(group)
    local pr = group:progress()
    local acc = pr.accuracy == pr.accuracy and pr.accuracy or nil
    host.write_atomic(path, metrics.json.encode { round = math.max(pr.round, 0), accuracy = acc,
                                                  count = acc and 1 or 0, sent = pr.sent })
  end)
  local code = 0
  for _, f in ipairs(failures(results)) do
    io.stderr:write(string.format("node %d failed: %s\n", f.uid, f.err:match("[^\n]*")))
    code = 1
  end
  return code
end

return M
