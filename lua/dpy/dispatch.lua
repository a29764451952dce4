--- dpy.dispatch: runs an experiment's processes on remote machines over SSH (libssh).
-- remotes.lua returns { defaults = {...}, remotes = { { host = "a" }, ... } }; a job's remotes get
-- `processes` processes each (contiguous blocks of node uids, as on one machine), listening on
-- address:port, port + 1, ... Dispatch checks each remote's dpy-lua version and build, prepares the run
-- locally (config, manifest, graph, partition, the address of every process), uploads it with
-- every file the run uses (the run directory's copies, at the same relative paths) over SFTP
-- into a fresh remote directory, starts the processes, shows the progress of the whole run, and
-- copies back every <uid>.log, <uid>.metrics.json and <uid>.model.pt, and with checkpoint_every
-- each node's checkpoint of the last round every node finished (what --resume needs).
-- The watcher (each process's pid is kept beside it): Ctrl-C / SIGTERM, or a failed process
-- (on_peer_failure = "abort", after stop_grace seconds for the others to stop by themselves),
-- sends SIGTERM to every process of the job, and SIGKILL stop_grace seconds later; a process whose
-- progress file stops changing for stop_grace seconds (stopped, frozen) is stopped the same way.
-- What finished is still collected. Jobs are queued onto free remotes (M.assign, M.run_jobs).
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
-- each value's kind too: a wrong one would fail later, deep inside connect or the port arithmetic
local PORT = { type = "integer", min = 1, max = 65535 }
local KEYS = { host = { type = "string" }, processes = { type = "integer", min = 1 }, work_dir = { type = "string" },
               user = { type = "string" }, port = PORT, identity = { type = "string" },
               backend = { one_of = { "cpu", "cuda", "rocm" } }, dpy_lua = { type = "string" },
               address = { type = "string" }, base_port = PORT, known_hosts = { type = "string" } }

--- Single-quotes s for a POSIX shell.
M.quote = require("dpy.paths").shell_quote

--- Reads remotes.lua: the list of remotes, each with the defaults filled in. Raises with the file.
function M.load_remotes(path)
  local chunk, err = loadfile(path, "t", { os = { getenv = os.getenv }, tostring = tostring, tonumber = tonumber,
                                           string = string, math = math, ipairs = ipairs, pairs = pairs,
                                           table = table, type = type, error = error })
  if not chunk then   -- none yet (a first dispatch): how to make one
    local f = io.open(path)
    if f then f:close() end
    error("remotes: " .. err .. (f and "" or " (copy remotes.example.lua to remotes.lua and list the machines "
                                 .. "there, or name the file with --remotes FILE)"), 0)
  end
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
    -- KEYS checked every value above (defaults and this remote's); 4.0 is 4, as for config keys
    for k, v in pairs(merged) do merged[k] = options.normalize(v, KEYS[k]) end
    merged.address = merged.address or merged.host
    merged.name = string.format("%s (%s)", r.name or r.host, r.host)
    list[i] = merged
  end
  return list
end

-- Runs commands[i] on sessions[i], every remote side by side (ssh.exec_all): its results, in order.
local function on_each(sessions, commands)
  local list = {}
  for i, s in ipairs(sessions) do list[i] = { s, commands[i] } end
  return ssh.exec_all(list)
end

--- Connects to every remote and checks its dpy-lua (on every remote side by side: each command
-- pays the remote's login once); returns the sessions (raises naming the remote).
function M.connect(remotes, opts)
  local sessions = {}
  local function fail(message)
    for _, o in ipairs(sessions) do o:close() end
    error(message, 0)
  end
  for i, r in ipairs(remotes) do
    local s, err = ssh.connect { host = r.host, port = r.port, user = r.user, identity = r.identity,
                                 known_hosts = r.known_hosts, accept_new = opts.accept_new_host_keys }
    if not s then fail("remote " .. r.name .. ": " .. err) end
    sessions[i] = s
  end
  local build, why = host.build()
  if not build then fail("this dpy-lua's build: " .. why) end
  local checks = {}
  for i, r in ipairs(remotes) do checks[i] = M.quote(r.dpy_lua) .. " --version" end
  for i, result in ipairs(on_each(sessions, checks)) do
    local r = remotes[i]
    local code, out, errout = table.unpack(result, 1, 3)
    if not code then fail("remote " .. r.name .. ": " .. out) end
    local version = code == 0 and out:match("^dpy%-lua (%S+)")
    if version == dpy.version and r.backend ~= "cpu" and not out:match("devices:[^\n]*cuda") then
      fail(string.format("remote %s: backend %s asked, but its dpy-lua sees no GPU (%s)", r.name,
                         r.backend, out:match("devices:[^\n]*") or "no device line"))
    end
    if version ~= dpy.version then
      if code == 127 or errout:match("not found") then
        fail(string.format("remote %s: dpy-lua not found (ran '%s'; install it there or set dpy_lua "
                           .. "in remotes.lua)", r.name, r.dpy_lua))
      end
      fail(string.format("remote %s: dpy-lua %s expected, found %s", r.name, dpy.version,
                         version or ("none (" .. (out .. errout):match("[^\n]*") .. ")")))
    end
    local theirs = out:match("\nbuild (%x+)\n")
    if theirs ~= build then
      fail(string.format("remote %s: dpy-lua %s build %s expected, found %s: the two differ in their C or Lua "
                         .. "sources, and the run's processes would compute differently (install this build "
                         .. "there, or set dpy_lua in remotes.lua)", r.name, dpy.version, build,
                         theirs and ("build " .. theirs) or ("no build (" .. (out:match("\nbuild ([^\n]*)")
                                                                           or "an older dpy-lua") .. ")")))
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
--- dispatch.processes(remotes) -> how many processes the remotes host in all
function M.processes(remotes)
  local n = 0
  for _, r in ipairs(remotes) do n = n + r.processes end
  return n
end

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

--- The remotes a job of `need` processes takes: the free ones (busy[i] not set) in file order,
-- each for as many of its processes as the job still needs (the last one may host fewer than its
-- `processes`). Returns their indices and copies of them with `processes` set to what the job
-- uses there, or nil when the free remotes have fewer processes than need.
function M.assign(remotes, busy, need)
  local indices, list = {}, {}
  for i, r in ipairs(remotes) do
    if need <= 0 then break end
    if not busy[i] then
      local copy = {}
      for k, v in pairs(r) do copy[k] = v end
      copy.processes = math.min(r.processes, need)
      need = need - copy.processes
      indices[#indices + 1], list[#list + 1] = i, copy
    end
  end
  if need > 0 then return nil end
  return indices, list
end

--- The directory of a run on a remote: work_dir/<run name>-<run id>, fresh for every run (a rerun
-- into the same --out never meets the files of an earlier one).
function M.remote_dir(remote, dir, run_id)
  return string.format("%s/%s-%d", remote.work_dir, dir:gsub("/+$", ""):match("([^/]+)$"), run_id)
end

-- Uploads the run (config, graph, partition, addresses, the files the run uses, at their paths
-- relative to the config: the names in `used`, and extra[i] to remote i only) into M.remote_dir on
-- every remote of opts; returns those directories.
local function upload(opts, used, extra)
  local launcher = require "dpy.launcher"
  local common = { "config.lua", rundir.EFFECTIVE, "partition.pt", "addresses.json" }
  if exists(opts.dir .. "/graph.json") then common[#common + 1] = "graph.json" end
  for _, f in ipairs(used) do common[#common + 1] = f end
  local rdirs, files, mkdirs = {}, {}, {}
  for i, r in ipairs(opts.remotes) do
    local rdir = M.remote_dir(r, opts.dir, opts.run_id)
    rdirs[i], files[i] = rdir, { table.unpack(common) }
    for _, f in ipairs(extra[i] or {}) do files[i][#files[i] + 1] = f end
    local dirs = { M.quote(rdir) }
    for _, f in ipairs(files[i]) do
      local d = f:match("^(.*)/[^/]+$")
      if d then dirs[#dirs + 1] = M.quote(rdir .. "/" .. d) end
    end
    -- an old key is removed first: SFTP keeps an existing file's mode
    mkdirs[i] = "mkdir -p " .. table.concat(dirs, " ") .. " && rm -f " .. M.quote(rdir .. "/" .. launcher.KEY_FILE)
  end
  for i, result in ipairs(on_each(opts.sessions, mkdirs)) do
    if result[1] ~= 0 then
      error(string.format("remote %s: cannot create %s: %s", opts.remotes[i].name, rdirs[i],
                          result[3] or result[2]), 0)
    end
    local s = opts.sessions[i]
    for _, f in ipairs(files[i]) do must(s:put(opts.dir .. "/" .. f, rdirs[i] .. "/" .. f)) end
    must(s:put(opts.dir .. "/" .. launcher.KEY_FILE, rdirs[i] .. "/" .. launcher.KEY_FILE, 384))   -- 0600
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
  if opts.resume then args[#args + 1] = "--resume " .. opts.resume end
  if opts.paused then args[#args + 1] = "--paused" end
  -- Without a terminal, sshd signals nothing when the session drops (dispatch killed, its machine
  -- gone): a watcher reads the channel's stdin (as fd 3: a background command's stdin is
  -- /dev/null), which ends only then, and sends the node SIGTERM; it goes when the node ends.
  return session:start(string.format("cd %s && { %s > process-%d.out 2>&1 & n=$!; echo $n > pid-%d; "
                                     .. "{ { cat <&3; kill $n; } > /dev/null 2>&1 & } 3<&0; w=$!; "
                                     .. "wait $n; r=$?; kill $w 2>/dev/null; exit $r; }",
                                     M.quote(rdir), table.concat(args, " "), p, p))
end

-- The node uids that remote i hosts in a run of cfg.processes processes laid out by owner.
local function uids_on(cfg, owner, i)
  local list = {}
  for p = 0, cfg.processes - 1 do
    if owner[p + 1] == i then
      for _, uid in ipairs(layout.uids_of(p, cfg.nodes, cfg.processes)) do list[#list + 1] = uid end
    end
  end
  return list
end

-- Copies the logs, metrics and final models of the nodes each remote hosts in this run, and its
-- processes' outputs, back into opts.dir (those that were written: a process that died early
-- wrote fewer).
local function collect(cfg, opts, owner, rdirs, bar)
  local function list(rdir) return "cd " .. M.quote(rdir) .. " && ls && ls -d attach/* 2>/dev/null; true" end
  local listings = {}
  for i, rdir in ipairs(rdirs) do listings[i] = list(rdir) end
  listings = on_each(opts.sessions, listings)
  for i, s in ipairs(opts.sessions) do
    local mine = {}
    for p = 0, cfg.processes - 1 do
      if owner[p + 1] == i then mine[string.format("process-%d.out", p)] = true end
    end
    for _, uid in ipairs(uids_on(cfg, owner, i)) do
      mine[uid .. ".log"], mine[uid .. ".metrics.json"], mine[uid .. ".model.pt"] = true, true, true
      mine["attach/" .. uid .. ".jsonl"] = true   -- what dpy-lua attach ran on the node
    end
    if next(mine) then host.mkdir_p(opts.dir .. "/attach") end
    local code, listing = table.unpack(listings[i], 1, 2)
    local again
    if not code then   -- the session dropped (the network, sshd): what the nodes wrote is still there
      local r = opts.remotes[i]
      again = ssh.connect { host = r.host, port = r.port, user = r.user, identity = r.identity,
                            known_hosts = r.known_hosts }
      if again then
        s = again
        local ok, c, l = pcall(again.exec, again, list(rdirs[i]))
        if ok and c then code, listing = c, l end
      end
      if not code then
        bar:warn(string.format("warning: remote %s: %s; the results of its nodes stay in %s there", r.name, listing,
                               rdirs[i]))
      end
    end
    for name in (code == 0 and listing or ""):gmatch("[^\n]+") do
      if mine[name] then
        local ok, err = s:get(rdirs[i] .. "/" .. name, opts.dir .. "/" .. name)
        if not ok then bar:warn("warning: " .. err) end
      end
    end
    if again then again:close() end
  end
end

--- Brings into dir/ckpt/<uid>/ the checkpoint of the last round every node of `nodes` finished,
-- from the remote directories rdirs[i] (of sessions[i]; a missing one holds none). Returns that
-- round, or nil and why not.
function M.fetch_checkpoints(sessions, rdirs, nodes, dir)
  local where, has, last, finds = {}, {}, {}, {}
  -- only whole files, as checkpoint.rounds counts them: a zip's local header first and its end
  -- record 22 bytes from the end (an empty or cut-short file under a checkpoint's name is none)
  local whole = [[h=$(printf 'PK\003\004') e=$(printf 'PK\005\006'); for f; do ]]
                .. [[[ "$(head -c 4 "$f")" = "$h" ] && [ "$(tail -c 22 "$f" | head -c 4)" = "$e" ] && echo "$f"; done]]
  for i = 1, #sessions do
    finds[i] = "cd " .. M.quote(rdirs[i] .. "/ckpt") .. " 2>/dev/null && find . -name '*.ckpt' -size +21c -exec sh -c "
               .. M.quote(whole) .. " sh {} +"
  end
  for i, result in ipairs(on_each(sessions, finds)) do
    local code, listing = table.unpack(result, 1, 2)
    for uid, r in (code == 0 and listing or ""):gmatch("%./(%d+)/(%d+)%.ckpt") do
      uid, r = math.tointeger(tonumber(uid)), math.tointeger(tonumber(r))
      where[uid], has[uid] = i, has[uid] or {}
      has[uid][r], last[uid] = true, math.max(last[uid] or 0, r)
    end
  end
  local round = math.huge
  for u = 0, nodes - 1 do
    if not last[u] then return nil, string.format("node %d has no checkpoint on the remotes", u) end
    round = math.min(round, last[u])
  end
  for u = 0, nodes - 1 do
    if not has[u][round] then return nil, string.format("node %d has no checkpoint of round %d", u, round) end
  end
  for u = 0, nodes - 1 do
    local rel = string.format("ckpt/%d/%d.ckpt", u, round)
    local ok, err = host.mkdir_p(string.format("%s/ckpt/%d", dir, u))
    if ok then ok, err = sessions[where[u]]:get(rdirs[where[u]] .. "/" .. rel, dir .. "/" .. rel) end
    if not ok then return nil, err end
  end
  return round
end

-- The failed nodes, from the processes' outputs (or how a process ended when it names none).
local function failures(cfg, opts, codes, channels, owner)
  local launcher = require "dpy.launcher"
  local failed = {}
  for p = 0, cfg.processes - 1 do
    if codes[p + 1] ~= 0 then
      local f = io.open(string.format("%s/process-%d.out", opts.dir, p))
      local text = f and f:read("a") or channels[p + 1]:output()
      if f then f:close() end
      local what = string.format("process %d on %s", p, opts.remotes[owner[p + 1]].name)
      launcher.output_failures(failed, text, codes[p + 1] == -1 and what .. " lost its connection"
                                             or launcher.exit_text(what, codes[p + 1]))
    end
  end
  return failed
end

-- {==== a job: started, watched, finished ====}

local Job = {}
Job.__index = Job

-- The files a resumed job uploads besides the run's: each remote's nodes' checkpoints of round
-- opts.resume, and their logs (a resumed node appends to its log).
local function resume_files(cfg, opts, owner)
  local extra = {}
  for i in ipairs(opts.remotes) do
    extra[i] = {}
    for _, uid in ipairs(uids_on(cfg, owner, i)) do
      table.insert(extra[i], string.format("ckpt/%d/%d.ckpt", uid, opts.resume))
      if exists(string.format("%s/%d.log", opts.dir, uid)) then table.insert(extra[i], uid .. ".log") end
    end
  end
  return extra
end

--- Starts a job: cfg as loaded, opts = { dir, config (path), source, included (config.load's),
-- overrides, remotes, sessions (the job's: see M.assign), run_id, argv, force, bar } or, to
-- continue a run from its checkpoints, { dir, config, files (the manifest's), resume = round,
-- remotes, sessions, run_id, argv, bar }. Returns the job (job:poll(), job:stop(), job:finish()).
function M.start_job(cfg, opts)
  local launcher = require "dpy.launcher"
  local job = setmetatable({ cfg = cfg, opts = opts, bar = opts.bar or progress.new(), start = host.clock(),
                             codes = {}, beats = {}, silent = {}, last = {}, polled = 0,
                             term_at = math.huge, kill_at = math.huge,
                             total = { round = 0, sent = 0, accuracy = 0 / 0 } }, Job)
  -- a resumed run's progress counts the bytes of its rounds before, as its summary does
  job.base = opts.resume and launcher.resumed_base(cfg, opts.dir, opts.resume)
  local base = layout.base_port({ port = cfg.port, processes = M.processes(opts.remotes) }, opts.run_id)
  job.owner, job.addresses = mapping(opts.remotes, base)
  cfg.processes = #job.owner
  job.left = cfg.processes
  if cfg.nodes < cfg.processes then
    error(string.format("%d processes on the remotes for %d nodes", cfg.processes, cfg.nodes), 0)
  end
  local used, extra = {}, {}
  if opts.resume then
    require("dpy.experiment").record_resume(opts)
    for _, f in ipairs(opts.files or {}) do used[#used + 1] = f.file end
    extra = resume_files(cfg, opts, job.owner)
  else
    local prepared = require("dpy.experiment").write_run_files(cfg, {
      dir = opts.dir, source = opts.source, included = opts.included, config = opts.config, argv = opts.argv,
      run_id = opts.run_id, launcher = "dispatch", force = opts.force })
    for _, f in ipairs(prepared.files) do used[#used + 1] = f.file end
  end
  local info = layout.prepare(cfg, opts.dir, opts.layout)   -- what experiment.check built, if it ran
  opts.layout = nil
  must(host.write_atomic(opts.dir .. "/addresses.json", metrics.json.encode(job.addresses)))
  if info.spectral_gap then
    job.bar:line(string.format("%d nodes, %d edges, spectral gap %.4f", cfg.nodes, info.edges, info.spectral_gap))
  end
  launcher.make_key(opts.dir)
  job.rdirs, job.channels, job.forwards, job.extra = upload(opts, used, extra), {}, {}, {}
  -- sshd's MaxSessions (10 by default) counts the channels of one connection: a remote's session
  -- keeps room for SFTP, its commands and attach clients beside 6 processes; further processes
  -- get connections of their own, 8 processes each
  local slots = {}
  for p = 0, cfg.processes - 1 do
    local i = job.owner[p + 1]
    local slot = slots[i] or { session = opts.sessions[i], left = 6 }
    if slot.left == 0 then
      local r = opts.remotes[i]
      local s, err = ssh.connect { host = r.host, port = r.port, user = r.user, identity = r.identity,
                                   known_hosts = r.known_hosts }
      if not s then error("remote " .. r.name .. ": " .. err, 0) end
      job.extra[#job.extra + 1] = s
      slot = { session = s, left = 8 }
    end
    slots[i], slot.left = slot, slot.left - 1
    job.channels[p + 1] = start_process(cfg, opts, p, opts.remotes[i], slot.session, job.rdirs[i])
    -- dpy-lua attach here reaches the remote process's control socket through this session
    local fw, why = opts.sessions[i]:forward_unix(launcher.attach_socket(opts.dir, p),
                                                  launcher.attach_socket(job.rdirs[i], p))
    if not fw then job.bar:warn(string.format("process %d: %s (dpy-lua attach cannot reach it)", p, why)) end
    job.forwards[p + 1] = fw
  end
  return job
end

-- Sends sig to the job's processes still running (only process `only`, when given); SIGKILL is
-- said, process by process.
function Job:signal(sig, only)
  local pids = {}   -- remote index -> its pid files
  for p = 0, self.cfg.processes - 1 do
    if not self.codes[p + 1] and (only == nil or only == p) then
      local i = self.owner[p + 1]
      if sig == 9 then
        self.bar:warn(string.format("SIGKILL to process %d on %s, still running %g s after SIGTERM", p,
                                    self.opts.remotes[i].name, self.cfg.stop_grace))
      end
      pids[i] = pids[i] or {}
      table.insert(pids[i], "pid-" .. p)
    end
  end
  for i, files in pairs(pids) do
    local s = self.opts.sessions[i]
    pcall(s.exec, s, string.format("cd %s && for f in %s; do kill -%d $(cat $f) 2>/dev/null; done; true",
                                   M.quote(self.rdirs[i]), table.concat(files, " "), sig), 10)
  end
end

--- job:stop([sig]): SIGTERM to every process of the job, SIGKILL stop_grace seconds later to those
-- still running; sig (the signal that stopped dispatch) marks the job interrupted.
function Job:stop(sig)
  if self.stopping then return end
  self.stopping, self.interrupted = true, sig
  self:signal(15)
  self.kill_at = math.min(self.kill_at, host.clock() + self.cfg.stop_grace)
end

-- Reads every process's progress file (copied into the run directory) into self.total; a process
-- whose file has not changed for stop_grace seconds (it writes it twice a second) is stopped:
-- SIGTERM, then SIGKILL stop_grace seconds later.
function Job:read_progress(now)
  local cfg, grace = self.cfg, self.cfg.stop_grace
  local total, all = { round = math.huge, sent = 0, received = 0, accuracy = 0 / 0 }, true
  for p = 0, cfg.processes - 1 do
    local i = self.owner[p + 1]
    local here = string.format("%s/progress-%d.json", self.opts.dir, p)
    local t = self.opts.sessions[i]:get(string.format("%s/progress-%d.json", self.rdirs[i], p), here)
              and metrics.read(here) or self.last[p + 1]
    self.last[p + 1] = t
    if t then
      total.round, total.sent = math.min(total.round, t.round), total.sent + t.sent
      total.received = total.received + (t.received or t.sent)
      if t.accuracy then total.accuracy = t.accuracy end
    else
      all = false
    end
    local beat = self.beats[p + 1]
    if self.codes[p + 1] or not t then   -- ended, or no sign of life yet
      self.beats[p + 1] = beat
    elseif not beat or beat.value ~= t.beat then
      self.beats[p + 1] = { value = t.beat, at = now }
    elseif not self.silent[p + 1] and now - beat.at > grace then
      self.bar:warn(string.format("process %d on %s has not answered for %.0f s: stopping it", p,
                                  self.opts.remotes[i].name, now - beat.at))
      self:signal(15, p)
      self.silent[p + 1] = now
    elseif self.silent[p + 1] and now - self.silent[p + 1] > grace then
      self:signal(9, p)
      self.silent[p + 1] = math.huge
    end
  end
  if not all then total.round = 0 end
  self.total = total
  if total.round >= 1 and not self.first_round then self.first_round = now - self.start end
end

--- job:poll() -> whether every process of the job has ended: notes the processes that ended,
-- reads the progress (twice a second) and sends the signals that are due.
function Job:poll()
  local cfg, now = self.cfg, host.clock()
  for p = 0, cfg.processes - 1 do
    local code = not self.codes[p + 1] and self.channels[p + 1]:poll()
    if code then
      self.codes[p + 1], self.left = code, self.left - 1
      -- the others see the dead peer and stop by themselves (saving what they have)
      if code ~= 0 and cfg.on_peer_failure == "abort" then
        self.term_at = math.min(self.term_at, now + cfg.stop_grace)
      end
    end
  end
  if self.left == 0 then return true end
  if now > self.term_at then
    self:signal(15)
    self.term_at, self.kill_at = math.huge, math.min(self.kill_at, now + cfg.stop_grace)
  end
  if now > self.kill_at then
    self:signal(9)
    self.kill_at = math.huge
  end
  if now - self.polled > 0.5 then
    self.polled = now
    self:read_progress(now)
  end
  local joined = 0
  for _, fw in pairs(self.forwards) do joined = joined + fw:pump() end
  self.attached = joined > 0
  return false
end

--- job:finish() -> the launcher's summary (with failed, seconds, interrupted = { signal, number,
-- round } when a signal stopped it, also in the manifest), once every process ended: collects
-- the results.
function Job:finish()
  local launcher = require "dpy.launcher"
  local cfg, opts = self.cfg, self.opts
  local ended = host.clock()
  for _, fw in pairs(self.forwards) do fw:close() end
  for _, s in ipairs(self.extra) do s:close() end   -- their processes have ended
  self:read_progress(ended)
  collect(cfg, opts, self.owner, self.rdirs, self.bar)
  if cfg.checkpoint_every then
    local round, err = M.fetch_checkpoints(opts.sessions, self.rdirs, cfg.nodes, opts.dir)
    local complete = not self.interrupted
    for p = 1, cfg.processes do complete = complete and self.codes[p] == 0 end
    if not round and not complete then self.bar:warn("warning: no checkpoint to resume from came back: " .. err) end
  end
  local seconds = host.clock() - self.start
  local summary = launcher.summarize(cfg, opts.dir, seconds, opts.resume)
  -- an interrupted process is no failure of its own
  summary.failed = self.interrupted and {} or failures(cfg, opts, self.codes, self.channels, self.owner)
  summary.seconds = seconds
  summary.first_round_seconds = self.first_round   -- from the command (seen at 0.5 s polls)
  summary.collect_seconds = host.clock() - ended   -- from the last process's end
  summary.attached = launcher.record_attached(cfg, opts.dir)
  if self.interrupted then
    local sig = self.interrupted
    summary.interrupted = { signal = launcher.SIGNALS[sig] or ("signal " .. sig), number = sig,
                            round = self.total.round }
    launcher.mark_interrupted(opts.dir, summary.interrupted)
  end
  return summary
end

-- A line of the progress of the jobs running (by job number).
local function progress_text(running)
  local launcher = require "dpy.launcher"
  local keys = {}
  for k in pairs(running) do keys[#keys + 1] = k end
  table.sort(keys)
  if #keys == 1 then
    local job = running[keys[1]].job
    return launcher.progress_line(job.cfg, job.total, job.start, job.base)
  end
  local parts = {}
  for _, k in ipairs(keys) do
    local job = running[k].job
    parts[#parts + 1] = string.format("job %d round %d/%d", k, math.max(job.total.round, 0), job.cfg.rounds)
  end
  return table.concat(parts, "  ")
end

--- dispatch.run_jobs(jobs, remotes, sessions, done) -> the signal that stopped it, or nil.
-- jobs = { { cfg, opts (as start_job's, without remotes and sessions), processes }, ... }: each
-- job starts, in order, as soon as the free remotes (M.assign) have its processes, and keeps them
-- until it ends; done(k, cfg, opts, summary) after job k ends. Ctrl-C / SIGTERM stop the jobs
-- running (job:stop) and start no more. A job that cannot start stops the others and raises.
-- quiet: no progress line.
function M.run_jobs(jobs, remotes, sessions, done, quiet)
  host.catch_interrupt()
  local bar = progress.new { quiet = quiet }
  local busy, running, nextk, failure = {}, {}, 1, nil
  while next(running) or (nextk <= #jobs and not failure and not host.interrupted()) do
    local sig = host.interrupted()
    while nextk <= #jobs and not sig and not failure do
      local j = jobs[nextk]
      local indices, list = M.assign(remotes, busy, j.processes)
      if not indices and not next(running) then
        failure = string.format("a job of %d processes: the remotes have fewer", j.processes)
      end
      if not indices then break end
      j.opts.remotes, j.opts.sessions, j.opts.bar = list, {}, bar
      for n, i in ipairs(indices) do j.opts.sessions[n], busy[i] = sessions[i], nextk end
      local ok, job = pcall(M.start_job, j.cfg, j.opts)
      if ok then
        running[nextk] = { job = job, indices = indices }
      else
        failure = job
        for _, i in ipairs(indices) do busy[i] = nil end
        for _, r in pairs(running) do r.job:stop() end
      end
      nextk = nextk + 1
    end
    if sig then
      for _, r in pairs(running) do r.job:stop(sig) end
    end
    for k, r in pairs(running) do
      if r.job:poll() then
        running[k] = nil
        for _, i in ipairs(r.indices) do busy[i] = nil end
        local summary = r.job:finish()
        -- its last line: the job's end, as finish read it (the last poll's may be rounds behind)
        bar:update(progress_text { [k] = r }, true)
        bar:done()
        done(k, r.job.cfg, r.job.opts, summary)
      end
    end
    if next(running) then
      bar:update(progress_text(running))
      local attached = false   -- a client of dpy-lua attach waits on the forwarding: a shorter nap
      for _, r in pairs(running) do attached = attached or r.job.attached end
      host.sleep(attached and 0.005 or 0.1)
    end
  end
  bar:done()
  if failure then error(failure, 0) end
  return host.interrupted() or nil
end

--- Runs one job on all of opts.remotes (see start_job); returns its summary.
function M.run_job(cfg, opts)
  local summary, all = nil, 0
  for _, r in ipairs(opts.remotes) do all = all + r.processes end
  M.run_jobs({ { cfg = cfg, opts = opts, processes = all } }, opts.remotes, opts.sessions,
             function(_, _, _, s) summary = s end)
  return summary
end

return M
