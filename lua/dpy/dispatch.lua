--- dpy.dispatch: runs an experiment's processes on remote machines over SSH (libssh).
-- remotes.lua returns { defaults = {...}, remotes = { { host = "a" }, ... } }; every remote gets
-- `processes` processes (contiguous blocks of node uids, as on one machine), listening on
-- address:port, port + 1, ... Dispatch checks each remote's dpy-lua version, prepares the run
-- locally (config, manifest, graph, partition, the address of every process), uploads it with
-- every file the run uses (the run directory's copies, at the same relative paths) over SFTP,
-- starts the processes, shows the progress of the whole run,
-- and copies every <uid>.log and <uid>.metrics.json back. Ctrl-C or a failed process stops the
-- run everywhere (each process's pid is kept beside it); what finished is still collected.
local ssh = require "dpy.ssh.core"
local host = require "dpy.host.core"
local layout = require "dpy.layout"
local metrics = require "dpy.metrics"
local progress = require "dpy.progress"
local options = require "dpy.options"
local rundir = require "dpy.rundir"
local dpy = require "dpy"

local M = {}

local DEFAULTS = { processes = 1, work_dir = "dpy-runs", port = 22, backend = "cpu", dpy_lua = "dpy-lua",
                   base_port = nil, user = nil, identity = nil, address = nil, known_hosts = nil }
local KEYS = { host = true, processes = true, work_dir = true, user = true, port = true, identity = true,
               backend = true, dpy_lua = true, address = true, base_port = true, known_hosts = true }

--- Single-quotes s for a POSIX shell.
M.quote = require("dpy.paths").shell_quote

--- Reads remotes.lua: the list of remotes, each with the defaults filled in. Raises with the file.
function M.load_remotes(path)
  local chunk, err = loadfile(path, "t", { os = { getenv = os.getenv }, tostring = tostring,
                                           string = string, math = math, ipairs = ipairs })
  if not chunk then error("remotes: " .. err, 0) end
  local ok, t = pcall(chunk)
  if not ok then error("remotes: " .. tostring(t), 0) end
  if type(t) ~= "table" or type(t.remotes) ~= "table" or #t.remotes == 0 then
    error(path .. ": must return { defaults = {...}, remotes = { { host = ... }, ... } }", 0)
  end
  local defaults = t.defaults or {}
  options.check(defaults, KEYS, path .. ": defaults", 0)
  local list = {}
  for i, r in ipairs(t.remotes) do
    if type(r) ~= "table" or type(r.host) ~= "string" then
      error(string.format("%s: remotes[%d] needs a host", path, i), 0)
    end
    options.check(r, KEYS, string.format("%s: remotes[%d]", path, i), 0)
    local merged = {}
    for k, v in pairs(DEFAULTS) do merged[k] = v end
    for k, v in pairs(defaults) do merged[k] = v end
    for k, v in pairs(r) do merged[k] = v end
    if merged.backend ~= "cpu" and merged.backend ~= "cuda" and merged.backend ~= "rocm" then
      error(string.format("%s: remotes[%d] (%s): backend must be cpu, cuda or rocm", path, i, r.host), 0)
    end
    if math.type(merged.processes) ~= "integer" or merged.processes < 1 then
      error(string.format("%s: remotes[%d] (%s): processes must be an integer >= 1", path, i, r.host), 0)
    end
    merged.address = merged.address or merged.host
    merged.name = string.format("%s (%s)", r.name or r.host, r.host)
    list[i] = merged
  end
  return list
end

--- Connects to every remote and checks its dpy-lua; returns the sessions (raises naming the remote).
function M.connect(remotes, opts)
  local sessions = {}
  for i, r in ipairs(remotes) do
    local s, err = ssh.connect { host = r.host, port = r.port, user = r.user, identity = r.identity,
                                 known_hosts = r.known_hosts, accept_new = opts.accept_new_host_keys }
    if not s then
      for _, o in ipairs(sessions) do o:close() end
      error("remote " .. r.name .. ": " .. err, 0)
    end
    sessions[i] = s
    local code, out, errout = s:exec(M.quote(r.dpy_lua) .. " --version")
    local version = code == 0 and out:match("^dpy%-lua (%S+)")
    if version == dpy.version and r.backend ~= "cpu" and not out:match("devices:[^\n]*cuda") then
      for _, o in ipairs(sessions) do o:close() end
      error(string.format("remote %s: backend %s asked, but its dpy-lua sees no GPU (%s)", r.name,
                          r.backend, out:match("devices:[^\n]*") or "no device line"), 0)
    end
    if version ~= dpy.version then
      for _, o in ipairs(sessions) do o:close() end
      if code == 127 or (errout or ""):match("not found") then
        error(string.format("remote %s: dpy-lua not found (ran '%s'; install it there or set dpy_lua "
                            .. "in remotes.lua)", r.name, r.dpy_lua), 0)
      end
      error(string.format("remote %s: dpy-lua %s expected, found %s", r.name, dpy.version,
                          version or ("none (" .. (out .. errout):match("[^\n]*") .. ")")), 0)
    end
  end
  return sessions
end

local function must(ok, err)
  if not ok then error(err, 0) end
  return ok
end

local exists = require("dpy.paths").exists

-- Process p (0-based) -> the index of the remote hosting it, and its "address:port".
local function mapping(remotes, base)
  local owner, addresses = {}, {}
  for i, r in ipairs(remotes) do
    for k = 1, r.processes do
      local p = #owner
      owner[p + 1] = i
      addresses[p + 1] = string.format("%s:%d", r.address, r.base_port and r.base_port + k - 1 or base + p)
    end
  end
  return owner, addresses
end

--- The directory of a run on a remote: work_dir/<run name>-<run id>, fresh for every run (a rerun
-- into the same --out never meets the files of an earlier one).
function M.remote_dir(remote, dir, run_id)
  return string.format("%s/%s-%d", remote.work_dir, dir:gsub("/+$", ""):match("([^/]+)$"), run_id)
end

-- Uploads the run (config, graph, partition, addresses, and the run directory's copy of every
-- file the run uses, at its path relative to the config) into M.remote_dir on every remote;
-- returns those directories.
local function upload(opts, used)
  local launcher = require "dpy.launcher"
  local files = { { opts.dir .. "/config.lua", "config.lua" },
                  { opts.dir .. "/" .. rundir.EFFECTIVE, rundir.EFFECTIVE },
                  { opts.dir .. "/partition.pt", "partition.pt" },
                  { opts.dir .. "/addresses.json", "addresses.json" } }
  if exists(opts.dir .. "/graph.json") then files[#files + 1] = { opts.dir .. "/graph.json", "graph.json" } end
  for _, f in ipairs(used) do files[#files + 1] = { opts.dir .. "/" .. f.file, f.file } end
  local rdirs = {}
  for i, r in ipairs(opts.remotes) do
    local s, rdir = opts.sessions[i], M.remote_dir(r, opts.dir, opts.run_id)
    rdirs[i] = rdir
    local dirs = { M.quote(rdir) }
    for _, f in ipairs(files) do
      local d = f[2]:match("^(.*)/[^/]+$")
      if d then dirs[#dirs + 1] = M.quote(rdir .. "/" .. d) end
    end
    -- an old key is removed first: SFTP keeps an existing file's mode
    local key = rdir .. "/" .. launcher.KEY_FILE
    local code, _, err = s:exec("mkdir -p " .. table.concat(dirs, " ") .. " && rm -f " .. M.quote(key))
    if code ~= 0 then error(string.format("remote %s: cannot create %s: %s", r.name, rdir, err), 0) end
    for _, f in ipairs(files) do must(s:put(f[1], rdir .. "/" .. f[2])) end
    must(s:put(opts.dir .. "/" .. launcher.KEY_FILE, key, 384))   -- 0600
  end
  return rdirs
end

-- Starts process p on its remote, in the background of a shell that waits for it: its pid is kept
-- for stopping it, and its exit status (128 + the signal when killed) becomes the channel's.
-- The remote's node runs the effective config (overrides and seed applied), whose files name the
-- run directory's copies that upload put beside it.
local function start_process(cfg, opts, p, remote, session, rdir)
  local args = { M.quote(remote.dpy_lua), "node", rundir.EFFECTIVE, "--process", p, "--dir", ".", "--run-id",
                 opts.run_id, "--seed", cfg.seed, "processes=" .. cfg.processes }
  return session:start(string.format("cd %s && { %s > process-%d.out 2>&1 & echo $! > pid-%d; wait $!; }",
                                     M.quote(rdir), table.concat(args, " "), p, p))
end

-- The whole run's progress from each process's progress file (copied here), or nil.
local function read_progress(cfg, opts, owner, rdirs)
  local total = { round = math.huge, sent = 0, accuracy = 0 / 0 }
  for p = 0, cfg.processes - 1 do
    local i = owner[p + 1]
    local here = string.format("%s/progress-%d.json", opts.dir, p)
    local t = opts.sessions[i]:get(string.format("%s/progress-%d.json", rdirs[i], p), here) and metrics.read(here)
    if not t then return nil end
    total.round, total.sent = math.min(total.round, t.round), total.sent + t.sent
    if t.accuracy then total.accuracy = t.accuracy end
  end
  return total
end

-- Copies the logs and metrics of the nodes each remote hosts in this run, and its processes'
-- outputs, back into opts.dir (those that were written: a process that died early wrote fewer).
local function collect(cfg, opts, owner, rdirs, bar)
  local mine = {}   -- remote index -> { file name = true }
  for p = 0, cfg.processes - 1 do
    local set = mine[owner[p + 1]] or {}
    mine[owner[p + 1]] = set
    set[string.format("process-%d.out", p)] = true
    for _, uid in ipairs(layout.uids_of(p, cfg.nodes, cfg.processes)) do
      set[uid .. ".log"], set[uid .. ".metrics.json"] = true, true
    end
  end
  for i, s in ipairs(opts.sessions) do
    local code, listing = s:exec("cd " .. M.quote(rdirs[i]) .. " && ls")
    for name in (code == 0 and listing or ""):gmatch("[^\n]+") do
      if mine[i] and mine[i][name] then
        local ok, err = s:get(rdirs[i] .. "/" .. name, opts.dir .. "/" .. name)
        if not ok then bar:line("warning: " .. err) end
      end
    end
  end
end

-- The failed nodes, from the processes' outputs (or how a process ended when it names none).
local function failures(cfg, opts, codes, channels, owner)
  local failed = {}
  for p = 0, cfg.processes - 1 do
    if codes[p + 1] ~= 0 then
      local f = io.open(string.format("%s/process-%d.out", opts.dir, p))
      local text = f and f:read("a") or channels[p + 1]:output()
      if f then f:close() end
      local any = false
      for uid, err in text:gmatch("node (%d+) failed: ([^\n]*)") do
        failed[#failed + 1] = { uid = tonumber(uid), err = err }
        any = true
      end
      if not any then
        failed[#failed + 1] = { uid = -1, err = string.format("process %d on %s %s", p, opts.remotes[owner[p + 1]].name,
          codes[p + 1] == -1 and "lost its connection" or ("exited with " .. codes[p + 1])) }
      end
    end
  end
  return failed
end

--- Runs one job: cfg as loaded, opts = { dir, config (path), source, included (config.load's),
-- overrides, remotes, sessions, run_id, argv, force }. Returns the launcher's summary (with failed).
function M.run_job(cfg, opts)
  local launcher = require "dpy.launcher"
  local start = host.clock()
  local owner, addresses = mapping(opts.remotes, cfg.port or (30000 + opts.run_id % 25000))
  cfg.processes = #owner
  if cfg.nodes < cfg.processes then
    error(string.format("%d processes on the remotes for %d nodes", cfg.processes, cfg.nodes), 0)
  end
  local prepared = require("dpy.experiment").write_run_files(cfg, {
    dir = opts.dir, source = opts.source, included = opts.included, config = opts.config, argv = opts.argv,
    run_id = opts.run_id, launcher = "dispatch", force = opts.force })
  local info = layout.prepare(cfg, opts.dir)
  must(host.write_atomic(opts.dir .. "/addresses.json", metrics.json.encode(addresses)))
  local bar = progress.new()
  if info.spectral_gap then
    bar:line(string.format("%d nodes, %d edges, spectral gap %.4f", cfg.nodes, info.edges, info.spectral_gap))
  end
  launcher.make_key(opts.dir)
  local rdirs, channels = upload(opts, prepared.files), {}
  for p = 0, cfg.processes - 1 do
    local i = owner[p + 1]
    channels[p + 1] = start_process(cfg, opts, p, opts.remotes[i], opts.sessions[i], rdirs[i])
  end
  -- watch: stop everything on a failure (after a grace period) or on Ctrl-C
  host.catch_interrupt()
  local codes, left, deadline, stopped = {}, cfg.processes, nil, false
  local function stop_all()
    if stopped then return end
    stopped = true
    for i, s in ipairs(opts.sessions) do
      pcall(s.exec, s, string.format("cd %s && for f in pid-*; do kill -TERM $(cat $f) 2>/dev/null; done; true",
                                     M.quote(rdirs[i])), 10)
    end
  end
  local last_progress, first_round = 0, nil
  while left > 0 do
    for p = 0, cfg.processes - 1 do
      local code = not codes[p + 1] and channels[p + 1]:poll()
      if code then
        codes[p + 1], left = code, left - 1
        if code ~= 0 and not deadline then deadline = host.clock() + (cfg.on_peer_failure == "abort" and 15 or 60) end
      end
    end
    if host.interrupted() and not stopped then
      bar:line("interrupted: stopping every remote process")
      stop_all()
    end
    if deadline and host.clock() > deadline then stop_all() end
    if host.clock() - last_progress > 0.5 then
      last_progress = host.clock()
      local total = read_progress(cfg, opts, owner, rdirs) or { round = 0, sent = 0, accuracy = 0 / 0 }
      if total.round >= 1 and not first_round then first_round = host.clock() - start end
      bar:update(launcher.progress_line(cfg, total, start))
    end
    if left > 0 then host.sleep(0.1) end
  end
  local ended = host.clock()
  bar:done()
  collect(cfg, opts, owner, rdirs, bar)
  local seconds = host.clock() - start
  local summary = launcher.summarize(cfg, opts.dir, seconds)
  summary.failed, summary.seconds, summary.interrupted = failures(cfg, opts, codes, channels, owner), seconds,
                                                         host.interrupted()
  summary.first_round_seconds = first_round          -- from the command (seen at 0.5 s polls)
  summary.collect_seconds = host.clock() - ended     -- from the last process's end
  return summary
end

return M
