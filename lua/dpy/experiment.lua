--- dpy.experiment: runs an experiment config and writes its results to a run directory:
-- config.lua (as given), config.effective.lua and config.json (as run, defaults filled in), the
-- files the run uses (see dpy.rundir), manifest.json, and per node <uid>.log and <uid>.metrics.json.
-- A centralized run trains one node (uid 0).
local tensor = require "dpy.tensor"
local registry = require "dpy.registry"
local data = require "dpy.data"
local trainer = require "dpy.trainer"
local metrics = require "dpy.metrics"
local progress = require "dpy.progress"
local log = require "dpy.log"
local host = require "dpy.host.core"
local rundir = require "dpy.rundir"
local paths = require "dpy.paths"
local dpy = require "dpy"

local M = {}

--- A fresh run directory under root: root/<UTC timestamp>[-n].
function M.run_dir(root)
  local stamp = os.date("!%Y-%m-%dT%H-%M-%S")
  local dir = root .. "/" .. stamp
  local n = 1
  while io.open(dir .. "/manifest.json", "r") do
    n = n + 1
    dir = string.format("%s/%s-%d", root, stamp, n)
  end
  return dir
end

local function hostname()
  local f = io.open("/etc/hostname", "r")
  local name = f and f:read("l")
  if f then f:close() end
  return name or os.getenv("HOSTNAME") or "unknown"
end

local function write_json(path, value)
  paths.write(path, metrics.encode(value))
end

local function first_n(ds, n)
  if not n then return nil end
  return tensor.arange(math.min(n, data.size(ds)))
end

--- Checks, before anything is written, what can be known wrong without running: --out holding
-- a run already (unless opts.force), ports past 65535, a model that does not fit the dataset
-- (dpy.layout.check_model), a test set that does not match the training set (dpy.layout.check_splits),
-- and for a decentralized run all that dpy.layout.check finds (the algorithm's options against the
-- run, stragglers, churn, the graph, the dataset, the partition), a config the run directory cannot
-- record, a file the run uses that cannot be read. Ports in use: M.hold_ports. Keeps what it read in
-- opts.prepared, and the graph and partition it built in opts.layout (launcher.run writes them).
function M.check(cfg, opts)
  opts.replace = rundir.claim(opts.dir, opts.force)
  if cfg.nodes and cfg.port and cfg.port + cfg.processes - 1 > 65535 then   -- process p listens on port + p
    error(string.format("port: %d processes from port %d need ports up to %d, past 65535", cfg.processes,
                        cfg.port, cfg.port + cfg.processes - 1), 0)
  end
  local model = registry.spec("model", cfg.model)
  if cfg.loss == "nll" and model.outputs == "logits" then
    error(string.format("loss: nll takes log-probabilities; model '%s' gives logits (use cross_entropy)", model.name),
          0)
  end
  if cfg.nodes then
    opts.layout = require("dpy.layout").check(cfg)
  else   -- a centralized run's data, there or not, before anything is written
    local sets = {}
    for i, train in ipairs { true, false } do
      local ok, set = pcall(registry.build, "dataset", cfg.dataset, { train = train })
      if not ok then error("dataset: " .. tostring(set):gsub("^[^:\n]*%.lua:%d+: ", ""), 0) end
      sets[i] = set
    end
    require("dpy.layout").check_model(cfg, sets[1])
    require("dpy.layout").check_splits(cfg, sets[1], sets[2])
  end
  opts.prepared = rundir.prepare(cfg, opts)
end

--- A new run's id (it draws the run's ports and names its remote directories): the time and this process.
function M.new_run_id()
  return (os.time() * 1000 + host.pid()) % (1 << 40) + 1
end

--- experiment.hold_ports(cfg, opts): a run of several processes on this machine listens on their
-- ports from now on (opts.port, opts.listeners, which launcher.run hands to the processes), drawing
-- opts.run_id if it has none. cli.run calls it before the run directory is made: a port another
-- program holds is then a config error that writes nothing, not a failed run that left half a run
-- directory (which blocked a retry with the same --out). Raises as layout.hold_ports.
function M.hold_ports(cfg, opts)
  if not cfg.nodes or cfg.processes == 1 or opts.listeners then return end
  opts.run_id = opts.run_id or M.new_run_id()
  opts.port, opts.listeners = require("dpy.layout").hold_ports(cfg, opts.run_id)
end

--- Closes the ports experiment.hold_ports holds still: those of a run that failed before its processes took them.
function M.release_ports(opts)
  for _, fd in ipairs(opts.listeners or {}) do host.close(fd) end
  opts.listeners = nil
end

--- Writes the run directory's own files: config.lua (as given), config.effective.lua, the files
-- the run uses, config.json, manifest.json. Returns what rundir.prepare found (the files).
function M.write_run_files(cfg, opts)
  local dir = opts.dir
  local prepared = opts.prepared or rundir.prepare(cfg, opts)   -- everything read before a byte is written
  if opts.replace == nil then opts.replace = rundir.claim(dir, opts.force) end
  if opts.replace then rundir.remove(dir) end
  local ok, err = host.mkdir_p(dir)
  if not ok then error(err, 0) end
  if opts.source then
    paths.write(dir .. "/config.lua", opts.source)
  end
  rundir.write(dir, prepared)
  write_json(dir .. "/config.json", cfg)
  local versions = host.versions()
  local manifest = rundir.manifest(prepared, opts)
  for k, v in pairs {
    dpy_lua = dpy.version, build = host.build(), lua = versions.lua, torch = versions.torch, threads = versions.threads,
    seed = cfg.seed, host = hostname(), started = os.date("!%Y-%m-%dT%H:%M:%SZ"), nodes = cfg.nodes or 1,
    processes = cfg.processes, run_id = opts.run_id, launcher = opts.launcher,
    actions = cfg.nodes and require("dpy.actions").manifest(cfg) or nil,
  } do manifest[k] = v end
  write_json(dir .. "/manifest.json", manifest)
  return prepared
end

--- experiment.run(cfg, {dir, source, argv, quiet}) -> summary table; raises on failure, after
-- logging the error in the node's log (results already written stay as they are).
function M.run(cfg, opts)
  opts.t0 = opts.t0 or host.clock()
  local dir = opts.dir
  opts.run_id = opts.run_id or M.new_run_id()
  if cfg.threads then host.set_threads(cfg.threads) end
  M.write_run_files(cfg, opts)
  if cfg.nodes then return M.run_decentralized(cfg, opts) end
  local node_log = assert(log.open(dir .. "/0.log", 0))
  local tracker = metrics.new(0, dir .. "/0.metrics.json")
  local ok2, result = xpcall(M.train_centralized, debug.traceback, cfg, node_log, tracker, opts)
  if not ok2 then
    node_log:write("failed: %s", result)
    node_log:close()
    error(result, 0)
  end
  node_log:close()
  return result
end

--- experiment.resume(cfg, {dir, config, resume = round, argv, quiet}) -> summary: the run of dir
-- continued from its checkpoints of round opts.resume, in dir (manifest.json records it).
function M.resume(cfg, opts)
  opts.t0 = opts.t0 or host.clock()
  opts.run_id = opts.run_id or M.new_run_id()
  M.record_resume(opts)
  return M.run_decentralized(cfg, opts)
end

--- Adds to opts.dir's manifest.json, under `resumed`, { round = opts.resume, at, run_id, argv,
-- interrupted = the run's interruption it continues, if any }.
function M.record_resume(opts)
  local manifest = metrics.read(opts.dir .. "/manifest.json") or {}
  manifest.resumed = manifest.resumed or {}
  -- the interruption this resume continues from is its history, not the run's state: a resume that
  -- runs to the end leaves the run uninterrupted, and one interrupted again is marked anew
  table.insert(manifest.resumed, { round = opts.resume, at = os.date("!%Y-%m-%dT%H:%M:%SZ"), run_id = opts.run_id,
                                   argv = opts.argv, interrupted = manifest.interrupted })
  manifest.interrupted = nil
  write_json(opts.dir .. "/manifest.json", manifest)
end

function M.run_decentralized(cfg, opts)
  local launcher = require "dpy.launcher"
  opts.exe = opts.exe or host.exe()
  return launcher.run(cfg, opts)
end

-- Evaluates, records round r and saves the metrics file.
local function evaluate(ctx, r, train_loss)
  local loss, acc = trainer.evaluate(ctx.model, ctx.test, { batch_size = ctx.cfg.eval_batch_size,
                                                             indices = ctx.test_indices,
                                                             loss = ctx.cfg.loss, task = ctx.task })
  local t = ctx.tracker
  local now = host.clock()
  t:add("train_loss", r, train_loss)
  t:add("test_loss", r, loss)
  t:add("test_accuracy", r, acc)
  t:add("step", r, ctx.tr.steps)
  -- seconds of this evaluation interval (its round), as a decentralized node records its rounds'
  t:add("train_seconds", r, ctx.train_seconds - (ctx.train_before or 0))
  t:add("wall_seconds", r, now - (ctx.wall_before or ctx.start))
  ctx.train_before, ctx.wall_before = ctx.train_seconds, now
  local ok, err = t:save()
  if not ok then error("cannot write metrics: " .. err, 0) end
  ctx.log:write("round %d step %d: train loss %.4f, test loss %.4f, test accuracy %.4f", r,
                ctx.tr.steps, train_loss, loss, acc)
  return loss, acc
end

function M.train_centralized(cfg, node_log, tracker, opts)
  tensor.manual_seed(cfg.seed)
  local t0 = host.clock()
  local train = registry.build("dataset", cfg.dataset, { train = true })
  local test = registry.build("dataset", cfg.dataset, { train = false })
  local load_seconds = host.clock() - t0
  local task, shape_of = nil, train
  if cfg.task == "binary" then
    task = trainer.binary(cfg.positive_classes, train.classes)
    shape_of = setmetatable({ classes = 1 }, { __index = train })
  end
  local model = registry.build("model", cfg.model, { dataset = shape_of })
  local opt = registry.build("optimizer", cfg.optimizer, { model = model })
  local loader = data.loader(train, { batch_size = cfg.batch_size, indices = first_n(train, cfg.train_samples) })
  local tr = trainer.new { model = model, optimizer = opt, loader = loader, loss = cfg.loss, task = task }
  local steps_per_epoch = #loader
  local total = steps_per_epoch * cfg.epochs
  if cfg.max_steps then total = math.min(total, cfg.max_steps) end
  local eval_every = cfg.eval_every or math.max(1, steps_per_epoch // 4)
  node_log:write("%s: %s on %s (%d training samples, %d parameters), %d steps of batch %d, "
                 .. "data loaded in %.2f s", cfg.name, tostring(cfg.model[1] or cfg.model),
                 train.name, loader.n, model:numel(), total, cfg.batch_size, load_seconds)
  local ctx = { cfg = cfg, model = model, test = test, task = task, test_indices = first_n(test, cfg.test_samples),
                tracker = tracker, log = node_log, tr = tr, start = host.clock(), train_seconds = 0 }
  local bar = progress.new { quiet = opts.quiet }
  local round, loss_sum, loss_n = 0, 0, 0
  local last_loss, last_acc
  local t_train = host.clock()
  host.catch_interrupt()   -- Ctrl-C / SIGTERM end the loop after the step in hand; what was evaluated stays
  local stopped
  for step = 1, total do
    stopped = host.interrupted()
    if stopped then break end
    local loss = tr:step()
    loss_sum, loss_n = loss_sum + loss, loss_n + 1
    local elapsed = host.clock() - t_train
    local rate = tr.samples / (ctx.train_seconds + elapsed)
    bar:update(string.format("epoch %d/%d  step %d/%d  loss %.4f  %.0f samples/s  ETA %s",
                             (step - 1) // steps_per_epoch + 1, cfg.epochs, step, total,
                             loss_sum / loss_n, rate,
                             progress.duration((total - step) * cfg.batch_size / rate)))
    if step % eval_every == 0 or step == total then
      ctx.train_seconds = ctx.train_seconds + (host.clock() - t_train)
      round = round + 1
      last_loss, last_acc = evaluate(ctx, round, loss_sum / loss_n)
      if not opts.quiet then
        bar:line(string.format("round %d  step %d/%d  train loss %.4f  test loss %.4f  "
                               .. "test accuracy %.4f", round, step, total, loss_sum / loss_n,
                               last_loss, last_acc))
      end
      loss_sum, loss_n = 0, 0
      t_train = host.clock()
    end
  end
  bar:done()
  if stopped then
    local launcher = require "dpy.launcher"
    local what = { signal = launcher.SIGNALS[stopped] or ("signal " .. stopped), number = stopped, round = round }
    launcher.mark_interrupted(opts.dir, what)
    node_log:write("interrupted by %s after round %d", what.signal, round)
    return { interrupted = what, rounds = round, test_accuracy = last_acc, test_loss = last_loss }
  end
  local mem = host.memory()
  local summary = {
    rounds = round, steps = tr.steps, samples = tr.samples, train_seconds = ctx.train_seconds,
    wall_seconds = host.clock() - ctx.start, samples_per_second = tr.samples / ctx.train_seconds,
    test_accuracy = last_acc, test_loss = last_loss, rss_bytes = mem.rss,
    peak_tensor_bytes = mem.tensor_peak,
  }
  node_log:write("done: %d steps in %.1f s (%.0f samples/s), test accuracy %.4f", tr.steps,
                 summary.train_seconds, summary.samples_per_second, last_acc)
  return summary
end

return M
