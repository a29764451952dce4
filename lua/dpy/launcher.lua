--- dpy.launcher: runs a decentralized experiment. The launcher writes the run directory (config,
-- manifest, graph.json, partition.pt), then hosts the nodes: in this process when the config
-- says one process, else in child processes (`dpy-lua node ... --process p`) that reach each
-- other on Unix sockets (tcp with unix_sockets = false). It shows a live progress line and ends
-- with a summary table; it fails, naming the node and its error, when any node fails. Ctrl-C or
-- SIGTERM stops every node at once (the finished rounds stay, the manifest says so); a child
-- process that fails to stop, or stops answering, is sent SIGTERM and then SIGKILL, stop_grace
-- seconds apart.
local nodes_core = require "dpy.nodes.core"
local container = require "dpy.container"
local graph = require "dpy.graph"
local host = require "dpy.host.core"
local layout = require "dpy.layout"
local metrics = require "dpy.metrics"
local payload = require "dpy.payload"
local progress = require "dpy.progress"

local M = {}

M.KEY_FILE = "run.key"   -- the run's random key (0600): the processes' proof to each other

--- Makes a fresh run key in dir (every run its own: an old one is replaced).
function M.make_key(dir)
  local ok, err = nodes_core.make_key(dir .. "/" .. M.KEY_FILE)
  if not ok then error("cannot make the run key: " .. err, 0) end
end
M.SIGNALS = { [2] = "SIGINT", [15] = "SIGTERM", [1] = "SIGHUP", [13] = "SIGPIPE" }

--- The control socket of process p of run dir (dpy-lua attach).
function M.attach_socket(dir, p)
  return string.format("%s/attach/p%d.sock", dir, p)
end

--- Where process p of run dir listens, as it wrote it: { host, socket } (dpy-lua attach reaches a
-- process on another host, a rank of mpirun or Slurm sharing the run directory, through ssh).
function M.attach_where(dir, p)
  return string.format("%s/attach/p%d.host", dir, p)
end

--- This machine's name (what gethostname says).
function M.hostname()
  local f = io.open("/proc/sys/kernel/hostname")
  local name = f and f:read("l")
  if f then f:close() end
  return name or "localhost"
end

-- Writes process p's attach/p<p>.host: the name other hosts reach it by (DPY_ATTACH_HOST, else
-- the hostname) and its socket's absolute path there.
local function say_where(dir, p)
  local socket = M.attach_socket(dir, p)
  if socket:sub(1, 1) ~= "/" then socket = host.cwd() .. "/" .. socket end
  local ok, err = host.write_atomic(M.attach_where(dir, p), metrics.json.encode {
    host = os.getenv("DPY_ATTACH_HOST") or M.hostname(), socket = socket })
  if not ok then io.stderr:write(string.format("dpy-lua: process %d: %s (dpy-lua attach from another host cannot "
                                               .. "find it)\n", p, err)) end
end

-- The rank of each of uids in the order the nodes take the process's compute slots: the graph's
-- frontier_order, which keeps fewer models alive at once than uid order; nil (uid order) without
-- a fixed graph.
local function slot_ranks(cfg, dir, uids)
  if not layout.algorithm(cfg).graph then return nil end
  local g = require("dpy.layout_files").load_graph(dir)
  local order = not g.dynamic and not g.directed and graph.frontier_order(g)
  if not order then return nil end
  local ranks = {}
  for i, u in ipairs(uids) do ranks[i] = order[u] end
  return ranks
end

--- Makes sure a process can hold the descriptors of count nodes: each holds its log open, and
-- writes its metrics (and checkpoints) through a file of its own at a round's end, all nodes at
-- once; the process adds its sockets, libraries and the launcher's own. Raises a soft open-file
-- limit (ulimit -n) below that towards the hard one; raises, naming the limit, where even the hard
-- one is too low (past it, nodes failed at random places with messages that blamed something else:
-- "module not found", a dataset missing).
function M.check_open_files(count, processes, where)
  local need = 2 * count + 64 + processes
  local soft, hard = host.open_files(need)
  if soft >= need then return end
  error(string.format("%s%d node%s in one process need about %d open files; the limit is %d (ulimit -n%s): raise "
                      .. "it (ulimit -n %d, or nofile in /etc/security/limits.conf), or spread the nodes over more "
                      .. "processes", where or "", count, count == 1 and "" or "s", need, soft,
                      hard > soft and string.format("; hard limit %d", hard) or "", need), 0)
end

--- Hosts process p's nodes until they finish; calls tick(group) twice a second. A signal caught
-- by host.catch_interrupt stops every node at once.
-- Returns { [uid] = true | error message }, or raises when the fabric cannot start.
function M.host_process(cfg, p, opts, tick)
  local uids = layout.uids_of(p, cfg.nodes, cfg.processes)
  M.check_open_files(#uids, cfg.processes, "process " .. p .. ": ")
  local cores = host.versions().threads
  -- one intra-op thread per node: parallelism comes from the nodes (compute slots), and the
  -- same thread count in every layout keeps results bit-identical across layouts
  host.set_threads(cfg.threads or 1)
  -- before the nodes take their memory
  local huge, refused = host.huge_pages(cfg.huge_pages ~= false)
  if not huge and cfg.huge_pages == false then io.stderr:write("dpy-lua: huge_pages = false: " .. refused .. "\n") end
  local f = cfg.faults or {}
  local max_payload = opts.max_payload or payload.limit(cfg)
  local group, err = nodes_core.start {
    nodes = cfg.nodes, process = p, processes = cfg.processes,
    node_process = layout.node_process(cfg.nodes, cfg.processes), uids = uids,
    ranks = slot_ranks(cfg, opts.dir, uids),
    addresses = cfg.processes > 1 and (opts.addresses or layout.addresses(cfg, opts.run_id)) or nil,
    listen_fd = opts.listen_fd,
    run_id = opts.run_id, max_payload = max_payload,
    key_file = cfg.processes > 1 and (opts.key_file or opts.dir .. "/" .. M.KEY_FILE) or nil, encrypt = cfg.encrypt,
    tcp_only = not cfg.unix_sockets, no_ring = not cfg.shared_memory,
    slots = cfg.slots or cores, pin = cfg.pin_slots, connect_timeout = 60, threads = cfg.threads or 1,
    keep_freed = not cfg.release_memory,
    drop = f.drop, duplicate = f.duplicate, corrupt = f.corrupt, delay = f.delay, fault_seed = cfg.seed,
    latency = f.latency, latency_max = f.latency_max, bandwidth = f.bandwidth, bandwidth_min = f.bandwidth_min,
    attach_socket = M.attach_socket(opts.dir, p), paused = opts.paused and (opts.resume or 0) or nil,
    args = { config = container.config_text(cfg), dir = opts.dir, t0 = tostring(opts.t0 or ""),
             resume = opts.resume and tostring(opts.resume) or nil },
  }
  if not group then
    if host.interrupted() then   -- Ctrl-C or SIGTERM while it waited for its peers: no node ran
      io.stderr:write(string.format("dpy-lua: process %d: %s\n", p, err))
      return {}
    end
    error("process " .. p .. ": " .. err, 0)
  end
  local why = group:progress().attach_error
  if why then
    io.stderr:write(string.format("dpy-lua: process %d: %s (dpy-lua attach cannot reach it)\n", p, why))
  else
    say_where(opts.dir, p)
  end
  -- a first sign of life as soon as the process is connected: from here on, a process silent for
  -- stop_grace seconds is stopped (before, it may wait for slower peers as long as it takes)
  if tick then tick(group) end
  local stopped = false
  while not group:wait(0.5) do
    if host.interrupted() and not stopped then
      group:interrupt()
      stopped = true
    end
    if tick then tick(group) end
  end
  if tick then tick(group) end
  local results = group:results()
  group:close()
  if not why then os.remove(M.attach_where(opts.dir, p)) end
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

-- Signals that end a process, by number, for messages (SIGNALS: those a run stops at)
local KILLED_BY = { [6] = "SIGABRT", [7] = "SIGBUS", [8] = "SIGFPE", [9] = "SIGKILL", [11] = "SIGSEGV" }
for n, name in pairs(M.SIGNALS) do KILLED_BY[n] = name end

--- launcher.exit_text(what, code) -> "what exited with 1", or past 128 (a shell's and host.wait's
-- 128 + the signal) "what exited with 137 (killed by signal 9, SIGKILL)".
function M.exit_text(what, code)
  local text = string.format("%s exited with %d", what, code)
  if code <= 128 then return text end
  local name = KILLED_BY[code - 128]
  return string.format("%s (killed by signal %d%s)", text, code - 128, name and ", " .. name or "")
end

--- Adds to list what a failed process's output says: each node it names ("node N failed: why"),
-- or, naming none, one entry (uid -1): how the process ended and the output's last line, if any.
function M.output_failures(list, text, ended)
  local any = false
  for uid, err in text:gmatch("node (%d+) failed: ([^\n]*)") do
    list[#list + 1] = { uid = tonumber(uid), err = err }
    any = true
  end
  if not any then
    local last = text:match("([^\n]+)\n*$")   -- a process killed at once has printed nothing
    list[#list + 1] = { uid = -1, err = last and ended .. ": " .. last or ended }
  end
end

-- Reads every node's metrics; returns the summary table's numbers (accuracy: the honest nodes';
-- diverged: { uid, round } of the nodes whose loss went NaN or Inf; trained: nodes with a loss;
-- rounds: the last any node finished; from: the round a resumed run started from, the seconds
-- per round those it ran).
function M.summarize(cfg, dir, seconds, from)
  from = from or 0
  local paths = require "dpy.paths"
  local function removed() error(string.format("the run directory %s was removed while the run went on", dir), 0) end
  if not paths.is_dir(dir) then removed() end
  local honest, why = require("dpy.honest").of_run(dir, cfg.nodes)
  -- a removal still under way (rm -rf takes the files first) leaves the directory without them
  if not honest and not paths.exists(dir .. "/manifest.json") then removed() end
  if not honest then error(why, 0) end
  local accs, node_bytes, rounds = {}, 0, 0
  local first_eval, last_eval = math.huge, -math.huge   -- the rounds of the nodes' last evaluations
  local diverged, trained, rejected = {}, 0, 0
  local server = container.has_server(cfg) and 0 or nil   -- its traffic is counted apart from the clients'
  local server_bytes = 0
  for u = 0, cfg.nodes - 1 do
    local m = metrics.read(string.format("%s/%d.metrics.json", dir, u))
    if m then
      local s = m.metrics
      if s.train_loss and #s.train_loss > 0 then trained = trained + 1 end
      local at = metrics.diverged_at(s)
      if at then diverged[#diverged + 1] = { uid = u, round = at } end
      if honest.set[u] and s.test_accuracy and #s.test_accuracy > 0 then
        local last = s.test_accuracy[#s.test_accuracy]
        accs[#accs + 1] = last[2]
        first_eval, last_eval = math.min(first_eval, last[1]), math.max(last_eval, last[1])
      end
      local bytes = 0
      for _, e in ipairs(s.bytes_sent or {}) do bytes = bytes + e[2] end
      for _, e in ipairs(s.bytes_received or {}) do bytes = bytes + e[2] end
      if u == server then server_bytes = bytes else node_bytes = node_bytes + bytes end
      for _, e in ipairs(s.rejected_payloads or {}) do rejected = rejected + e[2] end
      rounds = math.max(rounds, s.wall_seconds and #s.wall_seconds or 0)
    end
  end
  local sum, lo, hi = 0, math.huge, -math.huge
  for _, a in ipairs(accs) do
    sum, lo, hi = sum + a, math.min(lo, a), math.max(hi, a)
  end
  local refused = {}   -- packets and connections the processes' checks refused, by kind (outside ones too)
  for p = 0, cfg.processes > 1 and cfg.processes - 1 or -1 do
    local pr = metrics.read(string.format("%s/progress-%d.json", dir, p))
    for kind, n in pairs(pr and type(pr.refused) == "table" and pr.refused or {}) do
      n = math.tointeger(n)   -- JSON's numbers come back as floats
      if n then refused[kind] = (refused[kind] or 0) + n end
    end
  end
  return { honest = honest, evaluated = #accs, mean = #accs > 0 and sum / #accs or 0 / 0, min = lo, max = hi,
           eval_rounds = first_eval < last_eval and { first_eval, last_eval } or nil,
           diverged = diverged, trained = trained, rejected = rejected, refused = refused,
           -- MB: 10^6 bytes; (sent + received) / 2 per node, the server apart
           mb_per_node = node_bytes / 2 / (cfg.nodes - (server and 1 or 0)) / 1e6,
           server_mb = server and server_bytes / 2 / 1e6, rounds = rounds, from = from,
           seconds_per_round = rounds > from and seconds / (rounds - from) or 0 / 0 }
end

--- launcher.resumed_base(cfg, dir, from) -> what a run resumed from round from had done before:
-- { from, sent, received } (the bytes of rounds 1 … from in the metrics of the nodes' checkpoints
-- of round from, which they resume with: a metrics file may lag them; a server's left out), for
-- progress_line to count the whole run's traffic, as the summary does
function M.resumed_base(cfg, dir, from)
  local base = { from = from, sent = 0, received = 0 }
  local server = container.has_server(cfg) and 0 or nil
  local checkpoint = require "dpy.checkpoint"
  for u = 0, cfg.nodes - 1 do
    local ck = u ~= server and checkpoint.read(checkpoint.path(dir, u, from))
    if ck then
      for _, t in pairs(ck.tensors) do t:free() end
    end
    local s = ck and type(ck.meta.metrics) == "table" and ck.meta.metrics or {}
    for key, series in pairs { sent = s.bytes_sent, received = s.bytes_received } do
      for _, e in ipairs(type(series) == "table" and series or {}) do
        if type(e) == "table" and type(e[1]) == "number" and e[1] <= from and type(e[2]) == "number" then
          base[key] = base[key] + e[2]
        end
      end
    end
  end
  return base
end

--- launcher.progress_line(cfg, p, start [, base]) -> the live line; base: a resumed run's
-- resumed_base (its bytes count, its ETA from the rounds this run ran)
function M.progress_line(cfg, p, start, base)
  local done = math.max(p.round, 0)
  if p.paused then   -- by dpy-lua attach
    return string.format("round %d/%d  paused (dpy-lua attach)", done, cfg.rounds)
  end
  local from = base and base.from or 0
  done = math.max(done, from)
  local elapsed = host.clock() - start
  local eta = done > from and (cfg.rounds - done) * elapsed / (done - from) or 0 / 0
  -- as the summary's: (sent + received) / 2 per node, a server's left out (g:progress(0) leaves it out)
  local server = container.has_server(cfg)
  local sent = p.sent + (base and base.sent or 0)
  local received = (p.received or p.sent) + (base and base.received or 0)
  return string.format("round %d/%d  mean test accuracy %s  %.2f MB exchanged per %s  ETA %s", done,
                       cfg.rounds, p.accuracy == p.accuracy and string.format("%.4f", p.accuracy) or "-",
                       (sent + received) / 2 / (cfg.nodes - (server and 1 or 0)) / 1e6,
                       server and "client" or "node", progress.duration(eta))
end

-- g:progress() of a process's nodes, a server's traffic left out (the summary counts it apart)
local function group_progress(cfg, group) return group:progress(container.has_server(cfg) and 0 or nil) end

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
    if opts.paused then argv[#argv + 1] = "--paused" end
    for _, o in ipairs(opts.overrides or {}) do argv[#argv + 1] = o end
    if not cfg.port then argv[#argv + 1] = "port=" .. opts.port end   -- the ports held
    argv[#argv + 1] = "--listen-fd=3"   -- its port's socket, listening since the choice
    local out = string.format("%s/process-%d.out", opts.dir, p)
    local pid, err = host.spawn(argv, out, { fd = opts.listeners[p + 1] })
    if not pid then
      for _, c in ipairs(children) do host.kill(c, 15) end
      error("cannot start process " .. p .. ": " .. err, 0)
    end
    children[#children + 1] = pid
  end
  return children
end

-- Progress of child processes, read from the progress-<p>.json files they write; beats[p + 1]:
-- when process p last wrote its file (host.clock()), if it has.
-- The processes' progress files together: the round all reached, their accuracy and bytes, each
-- one's last beat, and how many have finished.
local function read_progress(cfg, dir)
  local total = { round = math.huge, accuracy = 0 / 0, sent = 0, received = 0, beats = {}, finished = 0 }
  local acc_sum, acc_n = 0, 0
  local files = {}
  for p = 0, cfg.processes - 1 do
    files[p] = metrics.read(string.format("%s/progress-%d.json", dir, p))
    total.beats[p + 1] = files[p] and files[p].beat
    if files[p] and files[p].done then total.finished = total.finished + 1 end
  end
  for p = 0, cfg.processes - 1 do
    local t = files[p]
    if not t then return { round = 0, accuracy = 0 / 0, sent = 0, beats = total.beats, finished = total.finished } end
    total.round = math.min(total.round, t.round)
    total.sent, total.received = total.sent + t.sent, total.received + (t.received or t.sent)
    total.paused = total.paused or t.paused
    if t.accuracy then
      acc_sum, acc_n = acc_sum + t.accuracy * t.count, acc_n + t.count
    end
  end
  if acc_n > 0 then total.accuracy = acc_sum / acc_n end
  return total
end

-- Sends sig to the children still running.
local function signal_all(children, codes, sig)
  for i, pid in ipairs(children) do
    if not codes[i] then host.kill(pid, sig) end
  end
end

-- Waits for the child processes; poll() shows progress and returns it (beats: each process's
-- last sign of life). The children stop by themselves when a peer fails or a signal comes
-- (forwarded as SIGTERM); one still running stop_grace seconds after a failure (abort) is sent
-- SIGTERM, and SIGKILL stop_grace seconds after that, except one still connecting to its peers (no
-- progress written yet: it would wait for the dead one until its connect timeout, with nothing
-- to save), sent SIGTERM at once; a child silent for stop_grace seconds (stopped, frozen) is
-- stopped the same way. Returns the exit codes, by process index + 1.
local function watch(cfg, children, bar, poll)
  local grace = cfg.stop_grace
  local codes, left = {}, #children
  local term_at, kill_at = math.huge, math.huge
  local silent, told, failed = {}, false, false
  while left > 0 do
    for i, pid in ipairs(children) do
      if not codes[i] then
        local code = host.wait(pid, true)
        if code then
          codes[i], left = code, left - 1
          -- the others see the dead peer and stop by themselves (saving what they have)
          if code ~= 0 and cfg.on_peer_failure == "abort" then
            term_at, failed = math.min(term_at, host.clock() + grace), true
          end
        end
      end
    end
    local now = host.clock()
    if host.interrupted() and not told then
      told = true
      bar:warn("interrupted: stopping every process")
      signal_all(children, codes, 15)
      kill_at = math.min(kill_at, now + grace)
    end
    if now > term_at then
      signal_all(children, codes, 15)
      term_at, kill_at = math.huge, math.min(kill_at, now + grace)
    end
    if now > kill_at then
      signal_all(children, codes, 9)
      kill_at = math.huge
    end
    local beats = poll().beats
    for i, pid in ipairs(children) do
      if failed and not codes[i] and not beats[i] and not silent[i] then   -- still connecting
        host.kill(pid, 15)
        silent[i] = now
      elseif not codes[i] and beats[i] and not silent[i] and now - beats[i] > grace then
        bar:warn(string.format("process %d has not answered for %.0f s: stopping it", i - 1, now - beats[i]))
        host.kill(pid, 15)
        silent[i] = now
      elseif not codes[i] and silent[i] and now - silent[i] > grace then
        host.kill(pid, 9)
        silent[i] = math.huge
      end
    end
    if left > 0 then host.sleep(0.2) end
  end
  return codes
end

-- Records in the manifest that the run was interrupted: { signal, round } (round: the last one
-- every node finished).
local function mark_interrupted(dir, what)
  local path = dir .. "/manifest.json"
  local manifest = metrics.read(path) or {}
  manifest.interrupted = { signal = what.signal, round = what.round }
  local ok, err = host.write_atomic(path, metrics.encode(manifest))
  if not ok then error(err, 0) end
end
M.mark_interrupted = mark_interrupted   -- the centralized run and dispatch record it the same way

--- Records in the manifest, under `attached`, the code that clients of dpy-lua attach ran on the
-- nodes ({ uid, round, at, code }, in time order); returns how many chunks (nil: none).
function M.record_attached(cfg, dir)
  local list = require("dpy.attach.node").changes(dir, cfg.nodes)
  if #list == 0 then return nil end
  local path = dir .. "/manifest.json"
  local manifest = metrics.read(path) or {}
  manifest.attached = list
  local ok, err = host.write_atomic(path, metrics.encode(manifest))
  if not ok then error(err, 0) end
  return #list
end

-- A run of several processes forks them from this one (host/lua/spawn.c), which it cannot once
-- libgomp has started its threads here (a full dataset's partition did): until then this process
-- works on one thread, and gives the processes the threads back.
local held
function M.hold_threads()
  if not held then
    held = host.versions().threads
    host.set_threads(1)
  end
end

local function release_threads()
  if held then host.set_threads(held) end
  held = nil
end

--- Runs the experiment; opts = { dir, config (path), overrides, exe, quiet, resume = round }.
-- Returns the summary (summary.interrupted = { signal, number, round } when a signal stopped it);
-- raises naming the failed nodes.
function M.run(cfg, opts)
  local bar = progress.new { quiet = opts.quiet }
  local start = host.clock()
  opts.t0 = opts.t0 or start
  if cfg.processes > 1 then M.hold_threads() end
  local info = layout.prepare(cfg, opts.dir, opts.layout)   -- what experiment.check built, if it ran
  opts.layout = nil
  if info.spectral_gap then
    bar:line(string.format("%d nodes, %d edges, spectral gap %.4f", cfg.nodes, info.edges, info.spectral_gap))
  end
  local failed, round = {}, 0
  local base = opts.resume and M.resumed_base(cfg, opts.dir, opts.resume)
  host.catch_interrupt()
  release_threads()
  if cfg.processes == 1 then
    local results = M.host_process(cfg, 0, opts, function(group)
      local pr = group_progress(cfg, group)
      round = math.max(pr.round, 0)
      bar:update(M.progress_line(cfg, pr, start, base))
    end)
    failed = failures(results)
  else
    M.make_key(opts.dir)
    if not opts.listeners then   -- cli.run's held since its checks (experiment.hold_ports); a resumed run's not
      opts.port, opts.listeners = layout.hold_ports(cfg, opts.run_id)
    end
    -- a resumed run's directory holds the progress files of the run it continues: their beats and
    -- rounds are that run's, not the processes' started now (its beats stopped them as silent)
    for p = 0, cfg.processes - 1 do os.remove(string.format("%s/progress-%d.json", opts.dir, p)) end
    local spawned, children = pcall(spawn_children, cfg, opts)
    for _, fd in ipairs(opts.listeners) do host.close(fd) end   -- the children hold them now
    opts.listeners = nil
    if not spawned then error(children, 0) end
    local codes = watch(cfg, children, bar, function()
      local pr = read_progress(cfg, opts.dir)
      bar:update(M.progress_line(cfg, pr, start, base))
      return pr
    end)
    round = read_progress(cfg, opts.dir).round
    for i, code in ipairs(codes) do
      if code ~= 0 then
        local out = io.open(string.format("%s/process-%d.out", opts.dir, i - 1))
        local text = out and out:read("a") or ""
        if out then out:close() end
        M.output_failures(failed, text, M.exit_text("process " .. (i - 1), code))
      end
    end
  end
  bar:done()
  round = math.max(round, opts.resume or 0)   -- every node has finished the round it resumed from
  local seconds = host.clock() - start
  local summary = M.summarize(cfg, opts.dir, seconds, opts.resume)
  summary.failed = failed
  summary.seconds = seconds
  local sig = host.interrupted()
  if sig then
    summary.interrupted = { signal = M.SIGNALS[sig] or ("signal " .. sig), number = sig, round = round }
    mark_interrupted(opts.dir, summary.interrupted)
  end
  summary.attached = M.record_attached(cfg, opts.dir)
  return summary
end

--- launcher.mpi_summary(cfg, dir, seconds, from) -> the summary of a run that mpirun or srun started
-- (resumed from round from),
-- once every process has finished (rank 0 waits for their progress files, at most stop_grace
-- seconds after its own nodes; then it sums up what is there). Failures: each rank prints its own.
function M.mpi_summary(cfg, dir, seconds, from)
  local deadline = host.clock() + (cfg.stop_grace or 30)
  local pr = read_progress(cfg, dir)
  local sig = host.interrupted()   -- the launcher passed Ctrl-C (SIGTERM) on: marked as `run` marks it,
  local function mark()            -- at once too (mpirun sends SIGKILL soon after)
    -- (a resumed run has every round up to from: its progress files may not say so yet)
    local stop = { signal = M.SIGNALS[sig] or ("signal " .. sig), number = sig, round = math.max(pr.round, from or 0) }
    mark_interrupted(dir, stop)
    return stop
  end
  if sig then mark() end
  while pr.finished < cfg.processes and host.clock() < deadline do
    host.sleep(0.2)
    pr = read_progress(cfg, dir)
  end
  local summary = M.summarize(cfg, dir, seconds, from)
  summary.failed, summary.seconds = {}, seconds
  if sig then summary.interrupted = mark() end
  summary.attached = M.record_attached(cfg, dir)
  summary.unfinished = cfg.processes - pr.finished
  return summary
end

--- `dpy-lua node`: hosts process p's nodes of a run the launcher prepared (or mpirun started),
-- writing progress-<p>.json twice a second. Returns the exit code. Its failed nodes: a line each
-- ("node N failed: why"), or with opts.grouped (a rank of mpirun / srun) as run prints them.
function M.node_main(cfg, opts)
  local p = opts.process
  local path = string.format("%s/progress-%d.json", opts.dir, p)
  host.catch_interrupt()
  local last
  local function write(done)
    local pr = last
    local acc = pr.accuracy == pr.accuracy and pr.accuracy or nil
    -- a resumed process has finished the round it resumed from: its slowest node says -1 until it ends one
    local refused   -- by kind, those this process's checks refused (the summary counts them)
    for kind, n in pairs(pr.rejected_by or {}) do
      if n > 0 then refused = refused or {}; refused[kind] = n end
    end
    host.write_atomic(path, metrics.json.encode { round = math.max(pr.round, opts.resume or 0), accuracy = acc,
                                                  done = done,
                                                  count = acc and 1 or 0, sent = pr.sent, received = pr.received,
                                                  beat = host.clock(),
                                                  paused = pr.paused or nil, links = pr.links,
                                                  shared_bytes = pr.shared_bytes, refused = refused })
  end
  local results = M.host_process(cfg, p, opts, function(group)
    last = group_progress(cfg, group)
    write(false)
  end)
  if last then write(true) end   -- for rank 0's summary under mpirun / srun
  local sig = host.interrupted()
  if sig then return 128 + sig end   -- its nodes stopped; their logs say where
  local failed = failures(results)
  if opts.grouped and #failed > 0 then   -- a rank of mpirun / srun, read by people: a line per distinct failure
    io.stderr:write(require("dpy.cli").failure_text(failed))
    return 1
  end
  for _, f in ipairs(failed) do   -- one line a node: what run and dispatch read back (output_failures)
    io.stderr:write(string.format("node %d failed: %s\n", f.uid, f.err:match("[^\n]*")))
  end
  return #failed > 0 and 1 or 0
end

return M
