--- dpy.cli: the dpy-lua subcommands written in Lua (run). main returns the exit code:
-- 0 success, 1 runtime error, 2 usage or config error (reported before anything runs), 128 + the
-- signal when SIGINT or SIGTERM stopped a run.
local argparse = require "argparse"
local pretty = require "dpy.pretty"

local M = {}

-- argparse takes the "-1" of "--seed -1" for an option of its own: such a value after one of
-- options is joined to it ("--seed=-1"), which argparse reads as the value. Returns a new list.
local function negative_values(args, options)
  local out = {}
  for _, arg in ipairs(args) do
    local prev = out[#out]
    if options[prev] and arg:match("^%-%d") then
      out[#out] = prev .. "=" .. arg
    else
      out[#out + 1] = arg
    end
  end
  return out
end

local SEED = { ["--seed"] = true }

-- --seed N: an integer, held to the config's bound on seed (one its JSON files keep as it is)
local function seed_arg(s)
  local n = math.tointeger(s)
  if not n then return nil, "--seed must be an integer, got " .. s end
  local problem = require("dpy.config").SCHEMA.seed.check(n)
  if problem then return nil, "--seed " .. problem end
  return n
end

local function run_parser()
  local p = argparse("dpy-lua run", "Run an experiment config on this machine.")
  p:argument("config", "The experiment config (a Lua file), or a run directory to rerun.")
  p:argument("overrides", "Config overrides, KEY=VALUE (VALUE read as a Lua value).")
   :args("*")
  p:option("--seed", "Seed (overrides the config's seed)."):convert(seed_arg)
  p:option("--out", "Run directory (default: out/<UTC timestamp>).")
  p:flag("--force", "Replace the run that --out holds.")
  p:flag("--resume", "Continue the run directory CONFIG from the last round every node checkpointed.")
  p:flag("--paused", "Start paused before the first round: dpy-lua attach steps or resumes it.")
  p:flag("-q --quiet", "Print only the summary.")
  return p
end

local function summary_text(dir, s)
  return table.concat({
    string.format("results in %s", dir),
    string.format("  %d steps (%d samples) in %.1f s: %.0f samples/s", s.steps, s.samples,
                  s.train_seconds, s.samples_per_second),
    string.format("  final test accuracy %.4f, test loss %.4f (%d evaluation round%s)",
                  s.test_accuracy, s.test_loss, s.rounds, s.rounds == 1 and "" or "s"),
    string.format("  memory: %.0f MiB resident, %.1f MiB peak in tensors",
                  s.rss_bytes / 2 ^ 20, s.peak_tensor_bytes / 2 ^ 20),
  }, "\n")
end

-- "8 rounds", or for a run resumed from round 2 the rounds it ran: "rounds 3-8"; for an interrupted
-- run whose furthest node (s.rounds) got past the last round every node finished, both
local function rounds_text(s)
  if s.rounds <= s.from then return "no round after round " .. s.from end
  local all = s.interrupted and s.interrupted.round or s.rounds
  if s.from == 0 then
    local text = string.format("%d round%s", s.rounds, s.rounds == 1 and "" or "s")
    return all < s.rounds and string.format("%s on the furthest node, %d on every node,", text, all) or text
  end
  local text = s.rounds == s.from + 1 and "round " .. s.rounds or string.format("rounds %d-%d", s.from + 1, s.rounds)
  return all < s.rounds and string.format("%s on the furthest node, to %d on every node,", text, all) or text
end

--- cli.decentralized_text(cfg, dir, summary) -> the lines a decentralized run's summary prints
function M.decentralized_text(cfg, dir, s)
  local lines = {
    string.format("results in %s", dir),
    string.format("  %d nodes (%s, %d process%s), %s in %.1f s%s", cfg.nodes,
                  type(cfg.algorithm) == "table" and cfg.algorithm[1] or cfg.algorithm,
                  cfg.processes, cfg.processes > 1 and "es" or "", rounds_text(s), s.seconds,
                  s.rounds > s.from and string.format(": %.3f s per round", s.seconds_per_round) or ""),
    "  " .. require("dpy.honest").describe(s.honest),
    s.evaluated > 0 and string.format("  final test accuracy over %d evaluated honest node%s: mean %.4f, min %.4f, "
                                      .. "max %.4f%s", s.evaluated, s.evaluated == 1 and "" or "s", s.mean, s.min,
                                      s.max,
                                      -- an interrupted run's nodes: not one round's accuracies
                                      s.eval_rounds and string.format(" (their last evaluations: rounds %.0f-%.0f)",
                                                                      s.eval_rounds[1], s.eval_rounds[2]) or "")
      or "  no honest node was evaluated",
    s.server_mb and string.format("  %.2f MB exchanged per client, %.2f MB by the server ((sent + received) / 2; "
                                  .. "MB = 10^6 bytes)", s.mb_per_node, s.server_mb)
      or string.format("  %.2f MB exchanged per node ((sent + received) / 2; MB = 10^6 bytes)", s.mb_per_node),
  }
  local from = {}   -- round -> uids whose loss went NaN or Inf from it
  for _, d in ipairs(s.diverged or {}) do
    from[d.round] = from[d.round] or {}
    table.insert(from[d.round], d.uid)
  end
  local parts = {}
  for round, uids in pairs(from) do parts[#parts + 1] = { round, pretty.uids(uids) .. " from round " .. round } end
  table.sort(parts, function(a, b) return a[1] < b[1] end)
  for i, p in ipairs(parts) do parts[i] = p[2] end
  if #parts > 0 then lines[#lines + 1] = "  diverged (loss NaN or Inf): " .. table.concat(parts, "; ") end
  local kinds, total = {}, 0   -- outside connections and forged packets among them: said, not only logged
  for kind, n in pairs(s.refused or {}) do kinds[#kinds + 1], total = kind, total + n end
  if total > 0 then
    table.sort(kinds)
    for i, kind in ipairs(kinds) do kinds[i] = kind .. " " .. s.refused[kind] end
    lines[#lines + 1] = string.format("  %d packet%s or connection%s refused by the processes' checks (%s; "
                                      .. "process-<p>.out names the first from each source)", total,
                                      total == 1 and "" or "s", total == 1 and "" or "s", table.concat(kinds, ", "))
  end
  if (s.rejected or 0) > 0 then   -- averages made without them: said, not only logged
    lines[#lines + 1] = string.format("  %d payload%s rejected as malformed (the nodes' logs say why)", s.rejected,
                                      s.rejected == 1 and "" or "s")
  end
  return table.concat(lines, "\n")
end

--- cli.failure_text(failed) -> the failed nodes ({ uid, err }), a line per distinct message (its first
-- line): "dpy-lua: nodes 0-3 failed: <their message>", where the nodes' own files in it are named
-- "<uid>." (their checkpoints "ckpt/<uid>/"): nodes that one failure (a full disk) met each in its
-- own files make one line (a node alone keeps its own path). Then the nodes that another node's
-- failure stopped, a line per node that failed first: "nodes 3, 5 stopped when node 4 failed", with
-- its cause when its own line is not there. A whole process (uid -1): "dpy-lua: <message>"; the
-- nodes that its end stopped (its nodes unreachable, gone) one line after it: "nodes 4-7 stopped
-- when process 0 ended".
function M.failure_text(failed)
  local stopped_by = require("dpy.exchange").stopped_by
  local own, stopped, by, failed_uids = {}, {}, {}, {}
  local function group(list, key, fields)
    if not by[key] then
      by[key] = fields
      fields.uids = {}
      list[#list + 1] = fields
    end
    return by[key]
  end
  local dead, ndead, lost, lost_uid = {}, 0, {}, {}   -- processes that ended, and the nodes they stopped
  for _, f in ipairs(failed) do
    -- run's "process 1 exited …", dispatch's "process 1 on <remote> exited …" or "… lost its connection"
    local p = f.uid < 0 and math.tointeger(tonumber(f.err:match("^process (%d+) exited")
                                                    or f.err:match("^process (%d+) on %S+ exited")
                                                    or f.err:match("^process (%d+) on %S+ lost its connection") or ""))
    if p then dead[p], ndead = true, ndead + 1 end
  end
  local function lost_to(msg)   -- the dead process whose end stopped a node, if that is what its words say
    local p = math.tointeger(tonumber(msg:match("^round %d+: node %d+'s process (%d+) is unreachable") or ""))
    if p and dead[p] then return p end
    if ndead == 1 and msg:match("^round %d+: peer %d+ is gone") then return (next(dead)) end
  end
  for _, f in ipairs(failed) do
    local msg = f.err:match("[^\n]*")
    local origin, cause = stopped_by(msg)
    local p = f.uid >= 0 and lost_to(origin and cause or msg)
    if f.uid < 0 then
      own[#own + 1] = { text = "dpy-lua: " .. msg }
    elseif p then
      lost_uid[f.uid] = p
      table.insert(group(lost, "lost " .. p, { process = p }).uids, f.uid)
    elseif origin then
      table.insert(group(stopped, "stopped " .. origin, { origin = origin, cause = cause }).uids, f.uid)
    else
      failed_uids[f.uid] = true
      local mine, dirs = msg:gsub("/ckpt/" .. f.uid .. "/", "/ckpt/<uid>/")   -- its checkpoints: <round>.ckpt
      if dirs == 0 then mine = msg:gsub("/" .. f.uid .. "%.(%a)", "/<uid>.%1") end   -- its log, metrics, model
      mine = mine:gsub("%.tmp%.%d+", ".tmp.<pid>")   -- write_atomic's file: nodes of other processes alike
      table.insert(group(own, "failed " .. mine, { msg = mine, alone = msg }).uids, f.uid)
    end
  end
  local lines = {}
  for _, g in ipairs(own) do
    lines[#lines + 1] = g.text or string.format("dpy-lua: %s failed: %s", pretty.uids(g.uids),
                                                #g.uids == 1 and g.alone or g.msg)   -- one node: its own path
  end
  local rest = {}
  for _, g in ipairs(stopped) do   -- stopped by a node that a dead process stopped: that process
    local p = lost_uid[g.origin]
    if p then table.move(g.uids, 1, #g.uids, #by["lost " .. p].uids + 1, by["lost " .. p].uids)
    else rest[#rest + 1] = g end
  end
  for _, g in ipairs(lost) do
    table.sort(g.uids)
    lines[#lines + 1] = string.format('dpy-lua: %s stopped when process %d ended (on_peer_failure = "abort"; %s)',
                                      pretty.uids(g.uids), g.process,
                                      #g.uids == 1 and "its log says when" or "their logs say when")
  end
  for _, g in ipairs(rest) do
    lines[#lines + 1] = string.format('dpy-lua: %s stopped when node %d failed%s (on_peer_failure = "abort"; %s)',
                                      pretty.uids(g.uids), g.origin,
                                      failed_uids[g.origin] and "" or ": " .. g.cause,
                                      #g.uids == 1 and "its log says when" or "their logs say when")
  end
  return table.concat(lines, "\n") .. "\n"
end

local function load_config(path, overrides, opts)
  local config = require "dpy.config"
  local ok, cfg, source, included = pcall(function()
    local values, text, inc = config.load(path, overrides, opts)
    return values, text, config.files(values, path, inc)
  end)
  if not ok then
    io.stderr:write("dpy-lua: ", tostring(cfg), "\n")
    return nil
  end
  return cfg, source, included
end

--- Prints a line for each setting of cfg that another key overrides or makes moot (config.warnings),
-- even with -q: the run goes on.
function M.warn_config(cfg)
  for _, w in ipairs(require("dpy.config").warnings(cfg)) do io.stderr:write("dpy-lua: warning: ", w, "\n") end
end

-- What `run` loads: path itself, or for a run directory its config.effective.lua and the rerun
-- record (dpy.rundir.rerun). Returns the config path [, rerun], or nil and a message.
local function rerun_of(path)
  local rundir = require "dpy.rundir"
  if not rundir.is_dir(path) then return path end
  local rerun, err = rundir.rerun(path)
  if not rerun then return nil, err end
  return rerun.config, rerun
end

-- Why --resume refuses a run whose nodes all checkpointed its last round and wrote their final
-- models (nil: it may go on): nothing is left to do (with --paused the nodes would wait for ever).
-- One stopped between the two ends by the resume.
local function finished_text(dir, cfg, round)
  if round < cfg.rounds then return nil end
  for uid = 0, cfg.nodes - 1 do
    if not require("dpy.paths").is_file(string.format("%s/%d.model.pt", dir, uid)) then return nil end
  end
  return string.format("%s: the run finished all its %d round%s (every node checkpointed round %d, and wrote its "
                       .. "final model): nothing to resume", dir, cfg.rounds, cfg.rounds == 1 and "" or "s", round)
end

-- `run --resume DIR`: the run of DIR continued in DIR from the round every node checkpointed.
-- Returns cfg, opts | nil, message, exit code.
local function resume_of(a, args)
  if a.out or a.seed or a.force or #a.overrides > 0 then
    return nil, "--resume continues a run as it was: no --out, --seed, --force or KEY=VALUE", 2
  end
  local rundir = require "dpy.rundir"
  local rerun, err = rundir.rerun(a.config)
  if not rerun then return nil, err, 1 end
  local cfg = load_config(rerun.config, {})
  if not cfg then return nil, "cannot load " .. rerun.config, 1 end
  if not cfg.nodes then return nil, rerun.dir .. ": --resume continues decentralized runs only", 1 end
  local round, why = require("dpy.checkpoint").resume_round(rerun.dir, cfg.nodes, cfg.checkpoint_every)
  if not round then return nil, why, 1 end
  local finished = finished_text(rerun.dir, cfg, round)
  if finished then return nil, finished, 1 end
  return cfg, { dir = rerun.dir, config = rerun.config, overrides = {}, quiet = a.quiet, resume = round,
                argv = { "run", table.unpack(args) } }
end

function M.run(args)
  local parser = run_parser()
  local ok, a = parser:pparse(negative_values(args, SEED))
  if not ok then
    io.stderr:write(parser:get_usage(), "\n", "dpy-lua run: ", a, "\n")
    return 2
  end
  local experiment = require "dpy.experiment"
  if a.resume then
    local cfg, opts, code = resume_of(a, args)
    if not cfg then
      io.stderr:write("dpy-lua run: ", opts, "\n")
      return code
    end
    if not a.quiet then print(string.format("resuming %s from round %d", opts.dir, opts.resume)) end
    opts.paused = a.paused
    local ran, summary = pcall(experiment.resume, cfg, opts)
    if not ran then
      io.stderr:write("dpy-lua: run failed: ", tostring(summary), "\n")
      return 1
    end
    return M.decentralized_result(cfg, opts.dir, summary)
  end
  local paths = require "dpy.paths"
  local config_path, rerun = rerun_of(a.config)
  if not config_path then   -- a directory that is no run
    io.stderr:write("dpy-lua: ", rerun, "\n")
    return 2
  end
  local cfg, source, included = load_config(config_path, a.overrides)
  if not cfg then return 2 end
  M.warn_config(cfg)
  if a.seed then cfg.seed = a.seed end
  local dir = a.out or experiment.run_dir("out")
  local overrides = { table.unpack(a.overrides) }
  if rerun then
    if paths.absolute(dir) == paths.absolute(rerun.dir) then
      io.stderr:write("dpy-lua: cannot rerun ", rerun.dir, " into itself: choose another --out\n")
      return 2
    end
  end
  local opts = { dir = dir, source = source, included = included, argv = { "run", table.unpack(args) },
                 quiet = a.quiet, config = config_path, overrides = overrides, force = a.force,
                 rerun_of = rerun and rerun.dir, paused = a.paused }
  if cfg.nodes and cfg.processes > 1 then require("dpy.launcher").hold_threads() end   -- until they fork
  local checked, err = pcall(function()
    experiment.check(cfg, opts)
    if cfg.nodes then   -- the process with the most nodes: the first
      local most = #require("dpy.layout").uids_of(0, cfg.nodes, cfg.processes)
      require("dpy.launcher").check_open_files(most, cfg.processes)
    end
    experiment.hold_ports(cfg, opts)   -- a port in use, found before the run directory is made
  end)
  if not checked then   -- the graph, the files the config names, an --out that holds a run, a busy port
    io.stderr:write("dpy-lua: ", tostring(err), "\n")
    return 2
  end
  local ran, summary = pcall(experiment.run, cfg, opts)
  experiment.release_ports(opts)   -- a run that failed before its processes took them
  if not ran then
    io.stderr:write("dpy-lua: run failed: ", tostring(summary), "\n")
    if paths.is_dir(dir) then io.stderr:write("(results written so far are in ", dir, ")\n") end
    return 1
  end
  if cfg.nodes then return M.decentralized_result(cfg, dir, summary) end
  local stop = summary.interrupted
  if stop then
    io.stderr:write(string.format("dpy-lua: interrupted by %s after round %d; the results so far are in %s\n",
                                  stop.signal, stop.round, dir))
    return 128 + stop.number
  end
  print(summary_text(dir, summary))
  return 0
end

--- Prints a decentralized run's summary and its failed nodes; returns the exit code.
function M.decentralized_result(cfg, dir, summary)
  print(M.decentralized_text(cfg, dir, summary))
  if summary.attached then   -- an experiment changed by hand says so
    io.stderr:write(string.format("dpy-lua: %d chunk(s) of code were run on nodes by dpy-lua attach (manifest.json: "
                                  .. "attached)\n", summary.attached))
  end
  local stop = summary.interrupted
  if stop then   -- the nodes' "interrupted!" is no failure of theirs
    io.stderr:write(string.format("dpy-lua: interrupted by %s after round %d; the results so far are in %s\n",
                                  stop.signal, stop.round, dir))
    return 128 + stop.number
  end
  if #summary.failed > 0 then   -- the messages; the tracebacks are in the nodes' logs
    io.stderr:write(M.failure_text(summary.failed), "(tracebacks in ", dir, "/<uid>.log)\n")
    return 1
  end
  if summary.trained > 0 and #summary.diverged >= summary.trained then
    io.stderr:write("dpy-lua: every node diverged (its loss went NaN or Inf); the results are in ", dir, "\n")
    return 1
  end
  return 0
end

--- dpy-lua node CONFIG --process P --dir DIR [--run-id N] [--seed N] [KEY=VALUE...]
function M.node(args)
  local p = argparse("dpy-lua node", "Host one process's nodes of a decentralized run.")
  p:argument("config", "The experiment config.")
  p:argument("overrides", "Config overrides, KEY=VALUE."):args("*")
  p:option("--process", "This process's index."):convert(math.tointeger)
  p:option("--uid", "Host only this node (one process per node: processes = nodes)."):convert(math.tointeger)
  p:option("--dir", "The run directory (prepared by the launcher).")
  p:option("--run-id", "The run's id (the same in every process)."):convert(math.tointeger)
  p:option("--seed", "Seed."):convert(seed_arg)
  p:option("--t0", "The launcher's start on the monotonic clock (for ready_seconds)."):convert(tonumber)
  p:option("--listen-fd", "A socket listening at this process's address, inherited from the launcher.")
   :convert(math.tointeger)
  p:option("--resume", "Resume from this round's checkpoints, or 'auto': the last round every node "
           .. "checkpointed in --dir.")
  p:flag("--force", "Started by mpirun or srun: replace the run that --dir holds.")
  p:flag("--paused", "Start paused before the first round (dpy-lua attach).")
  local started = require("dpy.host.core").clock()
  local ok, a = p:pparse(negative_values(args, SEED))
  if ok and a.uid then a.process = a.uid end
  local rendezvous = require "dpy.rendezvous"
  local rank, size, launched_by, job = rendezvous.detect()
  if ok and rank and not a.process and not a.uid and not a.listen_fd and (size < 1 or rank < 0 or rank >= size) then
    -- variables set by hand: the rendezvous would wait its whole timeout for ranks that are not there
    local l = {}
    for _, x in ipairs(rendezvous.LAUNCHERS) do if x.name == launched_by then l = x end end
    io.stderr:write(string.format("dpy-lua node: %s=%d and %s=%d (%s): a rank from 0 to %s - 1 expected\n",
                                  l.rank, rank, l.size, size, launched_by, l.size))
    return 2
  end
  if ok and not a.process and rank then a.process = rank end
  if not ok or not a.process or not a.dir then
    io.stderr:write(p:get_usage(), "\n", "dpy-lua node: ",
                    ok and "--process (or --uid, or a launcher's rank: mpirun, srun) and --dir are required"
                    or a, "\n")
    return 2
  end
  local cfg, source, included = load_config(a.config, a.overrides)
  if not cfg then return 2 end
  if a.seed then cfg.seed = a.seed end
  if not cfg.nodes then
    io.stderr:write("dpy-lua node: the config sets no 'nodes'\n")
    return 2
  end
  if a.uid then cfg.processes = cfg.nodes end   -- one node per process
  local range = a.uid and { "--uid", a.uid, cfg.nodes, "node" }
                or not rank and { "--process", a.process, cfg.processes, "process" }   -- a launcher's rank: its size
  if range and (range[2] < 0 or range[2] >= range[3]) then
    local option, index, count, noun = table.unpack(range)
    io.stderr:write(string.format("dpy-lua node: %s %d: the config has %d %s%s\n", option, index, count, noun,
                                  count == 1 and "" or noun == "node" and "s" or "es"))
    return 2
  end
  -- started by mpirun / srun (rank 0 prepares --dir); not a process of a launcher's own (--listen-fd), which a
  -- job's variables, inherited, would make look like one
  local joins = rank and not a.uid and not a.listen_fd and a.process == rank
  if not joins and not require("dpy.paths").is_file(a.dir .. "/partition.pt") then
    io.stderr:write("dpy-lua node: --dir ", a.dir, " holds no prepared run (no partition.pt): dpy-lua node hosts a ",
                    "process of a run that its launcher (dpy-lua run, dispatch) prepared there\n")
    return 2
  end
  if joins and rank == 0 then M.warn_config(cfg) end   -- mpirun / srun: no launcher said it
  local launcher = require "dpy.launcher"
  local opts = { process = a.process, dir = a.dir, run_id = a.run_id or 1, config = a.config,
                 overrides = a.overrides, t0 = a.t0, addresses = require("dpy.layout").read_addresses(a.dir),
                 paused = a.paused, listen_fd = a.listen_fd, grouped = joins }
  if a.resume then   -- before any process of the run can write a checkpoint
    local why
    opts.resume = math.tointeger(tonumber(a.resume))
    if a.resume == "auto" then
      opts.resume, why = require("dpy.checkpoint").resume_round(a.dir, cfg.nodes, cfg.checkpoint_every)
    elseif not opts.resume or opts.resume < 0 then
      why = "--resume: a round (an integer >= 0) or 'auto' expected, got " .. a.resume
    end
    if not opts.resume then
      io.stderr:write("dpy-lua node: ", why, "\n")
      return a.resume == "auto" and 1 or 2
    end
  end
  -- Ctrl-C passed on by the launcher during the rendezvous sets the flag it polls: the prompt's
  -- handler would raise "interrupted!" inside it, naming a line
  if joins then require("dpy.host.core").catch_interrupt() end
  local ran, code = pcall(function()
    if joins then   -- join the others
      cfg.processes = size
      if cfg.nodes < size then   -- a config error (exit 2), as `run processes=...` has it
        error({ usage = string.format("%d processes for %d nodes (a process hosts one node or more)", size,
                                      cfg.nodes) }, 0)
      end
      opts.run_id = a.run_id or rendezvous.run_id(a.dir, job)
      -- what this rank runs, for rank 0 to compare: its build, the effective config and the files it uses
      local prepared = require("dpy.rundir").prepare(cfg, { config = a.config, included = included })
      local text = { "build " .. assert(require("dpy.host.core").build()) .. "\n", prepared.effective }
      for _, f in ipairs(prepared.files) do   -- a data file may be large: its length and its ends
        local ends = #f.text > 131072 and f.text:sub(1, 65536) .. f.text:sub(-65536) or f.text
        text[#text + 1] = string.format("the file %s (%d bytes, hash %08x)\n", f.file, #f.text,
                                        require("dpy.random").hash32(ends))
      end
      opts.addresses = rendezvous.join(cfg, a.dir, rank, size, opts.run_id, function(rdv)
        if opts.resume then   -- the run directory holds the run already
          require("dpy.layout").prepare(cfg, a.dir)
          -- and the progress files of the attempt it continues (rank 0 would read their `done`)
          for q = 0, size - 1 do os.remove(string.format("%s/progress-%d.json", a.dir, q)) end
          -- as `run --resume` does: the manifest's `resumed`, where its `interrupted` moves
          require("dpy.experiment").record_resume { dir = a.dir, resume = opts.resume, run_id = opts.run_id,
                                                    argv = { "node", table.unpack(args) } }
          return
        end
        local layout = require "dpy.layout"
        local fits, checked = pcall(layout.check, cfg)   -- a config error: before the run directory is touched
        if not fits then error({ usage = tostring(checked) }, 0) end
        local rundir = require "dpy.rundir"
        local free, claimed = pcall(rundir.claim, a.dir, a.force, "--dir")   -- earlier results stay unless --force
        if not free then error({ usage = claimed }, 0) end
        -- the ranks already share a.dir: all but this launch's rendezvous goes
        if claimed then rundir.remove_except(a.dir, { rdv }) end
        require("dpy.experiment").write_run_files(cfg, { dir = a.dir, source = source, included = included,
                                                         config = a.config, argv = { "node", table.unpack(args) },
                                                         run_id = opts.run_id, launcher = launched_by,
                                                         replace = false })
        layout.prepare(cfg, a.dir, checked)
      end, nil, table.concat(text))
    end
    return launcher.node_main(cfg, opts)
  end)
  if not ran and type(code) == "table" and code.interrupted then   -- before the nodes started
    local signal = launcher.SIGNALS[code.interrupted] or ("signal " .. code.interrupted)
    if rank == 0 and opts.resume then   -- the resume took the mark over: the run is where it was
      launcher.mark_interrupted(a.dir, { signal = signal, round = opts.resume })
    end
    io.stderr:write(string.format("dpy-lua node: interrupted by %s before the nodes started\n", signal))
    return 128 + code.interrupted
  end
  if not ran then
    local usage = type(code) == "table" and code.usage
    io.stderr:write("dpy-lua node: ", usage or tostring(code), "\n")
    return usage and 2 or 1
  end
  if joins and rank == 0 then   -- the summary, as `run` prints it
    local summary = launcher.mpi_summary(cfg, a.dir, require("dpy.host.core").clock() - started, opts.resume)
    print(M.decentralized_text(cfg, a.dir, summary))
    if summary.unfinished > 0 then
      print(string.format("  (%d process%s had not finished when this summary was written)", summary.unfinished,
                          summary.unfinished == 1 and "" or "es"))
    end
    local stop = summary.interrupted
    if stop then
      io.stderr:write(string.format("dpy-lua node: interrupted by %s after round %d; the results so far are in %s\n",
                                    stop.signal, stop.round, a.dir))
    end
  end
  return code
end

--- dpy-lua repl CONFIG --uid U [KEY=VALUE...]: builds node U (its data shard, model, optimizer,
-- trainer, graph) in the REPL's state as the global `node`; called by repl.c before the prompt.
-- Returns 0, or 2 after reporting a usage or config error; raises on any other.
function M.repl_node(args)
  local p = argparse("dpy-lua repl", "An interactive prompt, optionally on a node of a config.")
  p:argument("config", "The experiment config (without one: the prompt alone)."):args("?")
  p:argument("overrides", "Config overrides, KEY=VALUE."):args("*")
  p:option("--uid", "The node to build (default 0)."):convert(math.tointeger)
  local ok, a = p:pparse(args)
  if not ok then
    io.stderr:write(p:get_usage(), "\ndpy-lua repl: ", a, "\n")
    return 2
  end
  -- either kind: the one node of a centralized config reads the keys of both
  local cfg = load_config(a.config, a.overrides, { either_kind = true })
  if not cfg then return 2 end
  local uid = a.uid or 0
  local overrides = { table.unpack(a.overrides) }
  local kind = cfg.nodes and (type(cfg.algorithm) == "table" and cfg.algorithm[1] or cfg.algorithm or "dpsgd")
               or "centralized"   -- the banner's: a centralized config's node runs no algorithm of nodes
  if not cfg.nodes then   -- a centralized config: one node holding the whole training set
    overrides[#overrides + 1] = "nodes=1"
    cfg = load_config(a.config, overrides, { either_kind = true })
    if not cfg then return 2 end
    cfg.graph = "full"
  end
  if uid < 0 or uid >= cfg.nodes then
    io.stderr:write(string.format("dpy-lua repl: --uid %d: the config has %d nodes\n", uid, cfg.nodes))
    return 2
  end
  local host = require "dpy.host.core"
  local layout = require "dpy.layout"
  cfg.processes = 1
  local fits, checked = pcall(layout.check, cfg)
  if not fits then
    io.stderr:write("dpy-lua repl: ", tostring(checked), "\n")
    return 2
  end
  local dir = string.format("/tmp/dpy-repl-%d", host.pid())
  assert(host.mkdir_p(dir))
  -- the node's scratch run directory goes when the prompt ends (the state closes)
  debug.getregistry()["dpy.repl.dir"] = setmetatable({}, { __gc = function()
    os.execute("rm -rf " .. require("dpy.paths").shell_quote(dir))
  end })
  layout.prepare(cfg, dir, checked)
  local group, ep = require("dpy.nodes.core").start {
    nodes = cfg.nodes, process = 0, processes = 1, node_process = layout.node_process(cfg.nodes, 1),
    uids = { uid }, attach = true, run_id = 1, slots = 1, args = {},
  }
  if not group then error(ep, 0) end
  local node = require("dpy.node").build(ep, { config = require("dpy.container").config_text(cfg), dir = dir })
  rawset(_G, "node", node)
  -- a node an action left out of the honest ones (label_flipping's poisoned) says so: it trains as they do
  local h = require("dpy.honest").of_manifest({ actions = require("dpy.actions").manifest(cfg) }, cfg.nodes)
  for _, g in ipairs(h and h.left_out or {}) do
    for _, u in ipairs(g.uids) do
      if u == uid then kind = string.format("%s; %s by %s", kind, g.key, g.action) end
    end
  end
  print(string.format("node %d of %d (%s): node:train([steps]), node:evaluate(), node.model, "
                      .. "node.optimizer, node.loader, node:neighbours(), node.endpoint", uid, cfg.nodes, kind))
  return 0
end

--- dpy-lua report RUN_DIR... [--out DIR] [--format svg|png]: compares runs (see dpy.report).
function M.report(args)
  local p = argparse("dpy-lua report", "Compare runs: a table, plots of accuracy against round, bytes, time "
                       .. "and local steps and of loss (gnuplot), and report.html with all of it.")
  p:argument("runs", "Run directories (out/<timestamp>)."):args("+")
  p:option("--out", "Where the plots go (default: ./report, outside the runs' directory).")
  p:option("--format", "svg or png."):choices { "svg", "png" }:default("svg")
  local ok, a = p:pparse(args)
  if not ok then
    io.stderr:write(p:get_usage(), "\ndpy-lua report: ", a, "\n")
    return 2
  end
  local report = require "dpy.report"
  local runs = {}
  for _, dir in ipairs(a.runs) do
    local run, err = report.load(dir)
    if not run then
      io.stderr:write("dpy-lua report: ", err, "\n")
      return 1
    end
    runs[#runs + 1] = run
  end
  local groups = report.seeds(runs)   -- runs of one config over several seeds, together
  report.name(runs)
  for _, g in ipairs(groups) do runs[#runs + 1] = g end
  print(report.table(runs))
  local out = a.out or "report"   -- never among the runs: `dpy-lua report out/*` again still works
  local made, err = require("dpy.host.core").mkdir_p(out)
  if made then made, err = report.plot(runs, out, a.format) end
  if not made then
    io.stderr:write("dpy-lua report: ", err, "\n")
    return 1
  end
  print("plots: " .. table.concat(made, ", "))
  local page, herr = report.html(runs, made, out)
  if not page then
    io.stderr:write("dpy-lua report: ", herr, "\n")
    return 1
  end
  print("page: " .. page)
  return 0
end

-- Prints job k's summary (dispatch), and its failed nodes unless interrupted; returns whether any failed.
local function dispatch_report(cfg, dir, summary)
  print(M.decentralized_text(cfg, dir, summary))
  print(string.format("  dispatch: first round done %s s after the start; results collected %.1f s after "
                      .. "the last process ended", summary.first_round_seconds and
                      string.format("%.1f", summary.first_round_seconds) or "-", summary.collect_seconds))
  if #summary.failed > 0 then io.stderr:write(M.failure_text(summary.failed)) end
  return #summary.failed > 0
end

-- Runs the jobs (dispatch.run_jobs) on the remotes, after prepare(sessions) if given; returns the exit code.
local function dispatch_jobs(jobs, remotes, a, out, prepare)
  local dispatch = require "dpy.dispatch"
  local function stopped(sessions)   -- Ctrl-C while it checked the config or connected
    local sig = require("dpy.host.core").interrupted()
    if not sig then return nil end
    for _, s in ipairs(sessions) do s:close() end
    io.stderr:write(string.format("dpy-lua dispatch: interrupted by %s before any process started\n",
                                  require("dpy.launcher").SIGNALS[sig] or ("signal " .. sig)))
    return 128 + sig
  end
  local ran, err = pcall(function()
    local early = stopped({})
    if early then return early end
    local sessions = dispatch.connect(remotes, { accept_new_host_keys = a.accept_new_host_keys })
    early = stopped(sessions)
    if early then return early end
    local code = 0
    if prepare then prepare(sessions) end
    local sig = dispatch.run_jobs(jobs, remotes, sessions, function(_, cfg, opts, summary)
      if dispatch_report(cfg, opts.dir, summary) then code = 1 end
    end, a.quiet)
    for _, s in ipairs(sessions) do s:close() end
    if sig then
      io.stderr:write(string.format("dpy-lua dispatch: interrupted by %s; the results so far are in %s\n",
                                    require("dpy.launcher").SIGNALS[sig] or ("signal " .. sig), out))
      return 128 + sig
    end
    return code
  end)
  if not ran then
    io.stderr:write("dpy-lua dispatch: ", tostring(err), "\n")
    return 1
  end
  return err
end

local function run_id(j)
  return (os.time() * 1000 + require("dpy.host.core").pid() + j) % (1 << 40) + 1
end

-- `dispatch --resume DIR`: the run of DIR continued from the last round every node checkpointed
-- (in DIR, else in its last attempt's remote directories), on the remotes of --remotes.
local function dispatch_resume(a, args)
  if a.out or a.seed or a.force or a.jobs ~= 1 or a.processes or #a.overrides > 0 then
    io.stderr:write("dpy-lua dispatch: --resume continues a run as it was: no --out, --seed, --force, --jobs, "
                    .. "--processes or KEY=VALUE\n")
    return 2
  end
  local rundir, metrics, dispatch = require "dpy.rundir", require "dpy.metrics", require "dpy.dispatch"
  local checkpoint = require "dpy.checkpoint"
  local rerun, err = rundir.rerun(a.config)
  if not rerun then
    io.stderr:write("dpy-lua dispatch: ", err, "\n")
    return 1
  end
  local cfg = load_config(rerun.config, {})
  if not cfg then return 1 end
  if not cfg.nodes then
    io.stderr:write("dpy-lua dispatch: ", rerun.dir, ": --resume continues decentralized runs only\n")
    return 1
  end
  local ok, remotes = pcall(dispatch.load_remotes, a.remotes)
  if not ok then
    io.stderr:write("dpy-lua dispatch: ", tostring(remotes), "\n")
    return 2
  end
  local manifest = metrics.read(rerun.dir .. "/manifest.json") or {}
  local all = 0
  for _, r in ipairs(remotes) do all = all + r.processes end
  local opts = { dir = rerun.dir, config = rerun.config, files = rerun.files, run_id = run_id(1),
                 argv = { "dispatch", table.unpack(args) } }
  local jobs = { { cfg = cfg, opts = opts, processes = math.min(manifest.processes or all, all) } }
  -- the newest checkpoints: those the run directory holds, or those still in the remote
  -- directories of its last attempt (when dispatch could not bring them back)
  local last = manifest.run_id   -- the last attempt's run id names its remote directories
  for _, r in ipairs(manifest.resumed or {}) do last = r.run_id or last end
  if not last then   -- no attempt ran on remotes: the run directory's checkpoints or none
    local round, why = checkpoint.resume_round(rerun.dir, cfg.nodes, cfg.checkpoint_every)
    if not round then
      io.stderr:write("dpy-lua dispatch: ", why, "\n")
      return 1
    end
  end
  local function prepare(sessions)
    if last then
      local rdirs = {}
      for i, r in ipairs(remotes) do rdirs[i] = dispatch.remote_dir(r, rerun.dir, last) end
      dispatch.fetch_checkpoints(sessions, rdirs, cfg.nodes, rerun.dir)
    end
    local round, why = checkpoint.resume_round(rerun.dir, cfg.nodes, cfg.checkpoint_every)
    if not round then error(why, 0) end
    local finished = finished_text(rerun.dir, cfg, round)
    if finished then error(finished, 0) end
    opts.resume = round
    if not a.quiet then print(string.format("resuming %s from round %d", rerun.dir, round)) end
  end
  return dispatch_jobs(jobs, remotes, a, rerun.dir, prepare)
end

--- dpy-lua dispatch CONFIG [--remotes FILE] [--jobs N] [--processes P] [--out DIR] [KEY=VALUE...],
-- dpy-lua dispatch --resume RUN_DIR [--remotes FILE]: the run's processes on remote machines over
-- SSH (see dpy.dispatch).
function M.dispatch(args)
  local p = argparse("dpy-lua dispatch", "Run an experiment on remote machines over SSH.")
  p:argument("config", "The experiment config (a Lua file); with --resume, the run directory.")
  p:argument("overrides", "Config overrides, KEY=VALUE."):args("*")
  p:option("--remotes", "The remotes file."):default("remotes.lua")
  p:option("--jobs", "Repeat the experiment N times, seeds seed, seed + 1, ..."):convert(math.tointeger):default("1")
  p:option("--processes", "Processes of each job (default: every remote's); jobs run side by side on free remotes.")
   :convert(math.tointeger)
  p:option("--out", "Run directory (default: out/<UTC timestamp>; with --jobs, job-<i> inside).")
  p:option("--seed", "Seed of the first job."):convert(seed_arg)
  p:flag("--force", "Replace the run that --out holds.")
  p:flag("--resume", "Continue the run directory CONFIG from the last round every node checkpointed.")
  p:flag("--accept-new-host-keys", "Add the host keys of remotes not yet in known_hosts (never a changed one).")
  p:flag("--paused", "Start paused before the first round: dpy-lua attach steps or resumes it.")
  p:flag("-q --quiet", "Print only the summaries.")
  local ok, a = p:pparse(negative_values(args, SEED))
  if ok and a.processes and a.processes < 1 then ok, a = false, "--processes: an integer >= 1 expected" end
  if ok and a.jobs < 1 then ok, a = false, "--jobs: an integer >= 1 expected" end   -- 0 ran one job
  if not ok then
    io.stderr:write(p:get_usage(), "\ndpy-lua dispatch: ", a, "\n")
    return 2
  end
  -- Ctrl-C from now on sets the flag that dispatch polls: the prompt's handler would raise
  -- "interrupted!" inside whatever runs, where a pcall may swallow it (the run went on) or name a line
  require("dpy.host.core").catch_interrupt()
  if a.resume then return dispatch_resume(a, args) end
  local cfg, source, included = load_config(a.config, a.overrides)
  if not cfg then return 2 end
  if not cfg.nodes then
    io.stderr:write("dpy-lua dispatch: the config sets no 'nodes'\n")
    return 2
  end
  M.warn_config(cfg)
  local dispatch = require "dpy.dispatch"
  local experiment = require "dpy.experiment"
  local out = a.out or experiment.run_dir("out")
  local function job_dir(j) return a.jobs > 1 and string.format("%s/job-%d", out, j) or out end
  local jobs = {}
  local checked, remotes = pcall(function()   -- before connecting to anything: config errors
    local list = dispatch.load_remotes(a.remotes)
    local all = 0
    for _, r in ipairs(list) do all = all + r.processes end
    if (a.processes or 0) > all then
      error(string.format("--processes %d: the remotes have %d (%s)", a.processes, all, a.remotes), 0)
    end
    if (a.processes or all) > cfg.nodes then
      error(string.format("%d processes for %d nodes", a.processes or all, cfg.nodes), 0)
    end
    for j = 1, math.max(1, a.jobs) do
      local job = require("dpy.config").copy(cfg)   -- where each key was set goes with it, for the checks' messages
      job.seed = (a.seed or cfg.seed) + j - 1   -- a job's seed names it: job j reruns alone with that seed
      job.processes = a.processes or all   -- the remotes', not the config's
      jobs[j] = { cfg = job, processes = job.processes,
                  opts = { dir = job_dir(j), config = a.config, source = source, included = included,
                           overrides = a.overrides, run_id = run_id(j), argv = { "dispatch", table.unpack(args) },
                           force = a.force, paused = a.paused } }
      -- the job's own seed: its graph and partition, kept in opts.layout for dispatch.start_job
      experiment.check(job, jobs[j].opts)
    end
    return list
  end)
  if not checked then
    io.stderr:write("dpy-lua dispatch: ", tostring(remotes), "\n")
    return 2
  end
  return dispatch_jobs(jobs, remotes, a, out)
end

--- dpy-lua attach RUN_DIR [--uid U]: a prompt on node U of a running experiment (dpy.attach.client).
function M.attach(args)
  local p = argparse("dpy-lua attach", "A prompt on one node of a running experiment: look inside, change it, "
                     .. "pause and step the run.")
  p:argument("dir", "The run directory of a run going on (here, or shared with the hosts of its processes).")
  p:option("--uid", "The node (without it: a list of the nodes, to choose from)."):convert(math.tointeger)
  p:option("--ssh", "The command that reaches processes on other hosts (ranks of mpirun or Slurm).", "ssh")
  local ok, a = p:pparse(args)
  if not ok then
    io.stderr:write(p:get_usage(), "\ndpy-lua attach: ", a, "\n")
    return 2
  end
  return require("dpy.attach.client").main(a)
end

--- main(command, args...) -> exit code
--- cli.globals() -> the set of the global names now (before a script runs; see config_hint).
function M.globals()
  local set = {}
  for k in pairs(_G) do set[k] = true end
  return set
end

--- cli.config_hint(before, path, [err]) -> a message when the script at path, just run, only
-- assigned config keys (`nodes = 16`...), or failed (err) calling a config's include: a config run
-- as a script by mistake; else nil.
function M.config_hint(before, path, err)
  local hint = "%s looks like an experiment config (it %s); did you mean `dpy-lua run %s`?"
  if err then   -- the script's own line (Lua shortens a long path to ".../its/tail")
    local at = type(err) == "string" and err:match("^(.-):%d+: attempt to call a nil value %(global 'include'%)")
    local own = at and (at == path or at:sub(1, 3) == "..." and path:sub(-(#at - 3)) == at:sub(4))
    return own and string.format(hint, path, "calls include", path) or nil
  end
  local schema = require("dpy.config").SCHEMA
  local keys = {}
  for k in pairs(_G) do
    if not before[k] then
      if not schema[k] then return nil end
      keys[#keys + 1] = k
    end
  end
  if #keys < 2 then return nil end   -- a script may set one such global; a config sets several
  table.sort(keys)
  return string.format(hint, path, "sets " .. table.concat(keys, ", ", 1, math.min(#keys, 4)), path)
end

function M.main(command, ...)
  local f = M[command]
  if type(f) ~= "function" or command == "main" then
    io.stderr:write("dpy-lua: unknown command '", tostring(command), "'\n")
    return 2
  end
  return f({ ... })
end

return M
