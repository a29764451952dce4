-- Epidemic Learning against a static topology at equal bytes: rounds until the mean test accuracy
-- of the nodes reaches TARGET, for D-PSGD on a static random S-regular graph, EL-Oracle and
-- EL-Local with the same S (every node sends S models a round in all three), on Fashion-MNIST with
-- the cnn split by Dirichlet alpha = 0.1 (non-IID, where topology matters). Prints a Markdown table.
--   scripts/dpy configs/epidemic/compare.lua [NODES [S [ROUNDS [SEEDS [LOCAL_STEPS [TARGET
--     [TEST_SAMPLES [KEY=VALUE...]]]]]]]]
-- (defaults 64 7 200 3 10 0.8 2000: the issue's setting; every node evaluates on the first
-- TEST_SAMPLES test images every 5 rounds; the README's table names the run it shows). KEY=VALUE
-- lines go into every run's config: a variant of the shared setting, 'optimizer={"sgd",lr=0.05}'.
-- The runs go seed by seed into
-- $TMPDIR/dpy_epidemic_<NODES>_<S>_<LOCAL_STEPS>_<TEST_SAMPLES>[_<KEY_VALUE...>]: a run found
-- finished there is read, not run again, so a comparison stopped part way goes on from there; a
-- finished run of more rounds is read up to ROUNDS (its first ROUNDS rounds are those of a run of
-- ROUNDS: nothing in these configs depends on the total), so a shorter table costs no new run.
local host = require "dpy.host.core"
local metrics = require "dpy.metrics"
local paths = require "dpy.paths"
local rundir = require "dpy.rundir"

local nodes = math.tointeger(tonumber(arg and arg[1])) or 64
local s = math.tointeger(tonumber(arg and arg[2])) or 7
local rounds = math.tointeger(tonumber(arg and arg[3])) or 200
local seeds = math.tointeger(tonumber(arg and arg[4])) or 3
local local_steps = math.tointeger(tonumber(arg and arg[5])) or 10
local target = tonumber(arg and arg[6]) or 0.8
local test_samples = math.tointeger(tonumber(arg and arg[7])) or 2000
local extra = table.move(arg or {}, 8, math.max(#(arg or {}), 7), 1, {})

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local base = paths.absolute(here .. "/../0_baseline.lua")
local work = os.getenv("TMPDIR") or "/tmp"
work = string.format("%s/dpy_epidemic_%d_%d_%d_%d", work, nodes, s, local_steps, test_samples)
if #extra > 0 then work = work .. "_" .. table.concat(extra, "_"):gsub("%W+", "_") end
assert(host.mkdir_p(work))

local variants = {
  { label = string.format("static %d-regular (D-PSGD)", s),
    lines = string.format('graph = { "regular", degree = %d }\nalgorithm = "dpsgd"\n', s) },
  { label = "EL-Oracle", lines = string.format('algorithm = { "epidemic", variant = "oracle", s = %d }\n', s) },
  { label = "EL-Local", lines = string.format('algorithm = { "epidemic", variant = "local", s = %d }\n', s) },
}

-- The config text of a run of variant v, seed and length r.
local function config(v, seed, r)
  return string.format('include %q\nseed = %d\nnodes = %d\npartition = { "dirichlet", alpha = 0.1 }\n'
                       .. 'rounds = %d\nlocal_steps = %d\neval_every = 5\ntest_samples = %d\n%s%s',
                       base, seed, nodes, r, local_steps, test_samples, v.lines,
                       #extra > 0 and table.concat(extra, "\n") .. "\n" or "")
end

-- The mean test accuracy over the evaluated nodes at each evaluation round up to ROUNDS, the MB a
-- node sent in those rounds (mean over nodes), and the first round by then in which a node's loss
-- went NaN or Inf (nil if none).
local function read_run(dir)
  local sums, counts, sent, diverged = {}, {}, 0, nil
  for uid = 0, nodes - 1 do
    local m = assert(metrics.read(string.format("%s/%d.metrics.json", dir, uid))).metrics
    local at = metrics.diverged_at(m)
    if at and at <= rounds then diverged = math.min(diverged or at, at) end
    for _, e in ipairs(m.test_accuracy or {}) do
      if e[1] <= rounds then
        sums[e[1]] = (sums[e[1]] or 0) + e[2]
        counts[e[1]] = (counts[e[1]] or 0) + 1
      end
    end
    for _, e in ipairs(m.bytes_sent) do
      if e[1] <= rounds then sent = sent + e[2] end
    end
  end
  local curve = {}
  for r, sum in pairs(sums) do curve[#curve + 1] = { r, sum / counts[r] } end
  table.sort(curve, function(a, b) return a[1] < b[1] end)
  return curve, sent / nodes / 1e6, diverged
end

-- The first evaluation round at which the curve reaches level, else unreached (or ">ROUNDS").
local function first_reaching(curve, level, unreached)
  for _, e in ipairs(curve) do if e[2] >= level then return e[1] end end
  return unreached or string.format(">%d", rounds)
end

-- The length of the finished run of variant v and seed in dir when it is at least ROUNDS long, or
-- nil: its config that of v and seed but for its rounds, every node evaluated at round ROUNDS and
-- at its last.
local function finished(dir, v, seed)
  local f = io.open(dir .. ".lua")
  local text = f and f:read("a")
  if f then f:close() end
  local had = text and math.tointeger(tonumber(text:match("\nrounds = (%d+)\n")))
  if not had or had < rounds or text ~= config(v, seed, had) then return nil end
  for uid = 0, nodes - 1 do
    local m = metrics.read(string.format("%s/%d.metrics.json", dir, uid))
    local acc = m and m.metrics.test_accuracy or {}
    local at = false
    for _, e in ipairs(acc) do at = at or e[1] == rounds end
    if not (at and acc[#acc][1] == had) then return nil end
  end
  return had
end

local bin = host.exe()
local rows = {}
for i, v in ipairs(variants) do rows[i] = { label = v.label, reached = {}, lower = {}, final = {}, mb = 0 } end
local t_all = host.clock()
for seed = 1, seeds do
  for i, v in ipairs(variants) do
    local row = rows[i]
    local dir = string.format("%s/%s_%d", work, v.label:gsub("%W", "_"), seed)
    local t0 = host.clock()
    local had = finished(dir, v, seed)
    if not had then
      local f = assert(io.open(dir .. ".lua", "w"))
      f:write(config(v, seed, rounds))
      f:close()
      rundir.remove(dir)
      -- forked from this process, libraries loaded (host.spawn), as dpy-lua run starts its processes
      local pid = assert(host.spawn({ bin, "run", dir .. ".lua", "--out", dir, "-q" }, dir .. ".out"))
      local ok = host.wait(pid) == 0
      -- a run whose every node diverged exits 1 but is finished: a result, not a failure
      if not (ok or finished(dir, v, seed)) then
        error(string.format("%s, seed %d: the run failed (see %s.out)", v.label, seed, dir), 0)
      end
    end
    local curve, mb, diverged = read_run(dir)
    local unreached = diverged and string.format("diverged (round %d)", diverged)
    row.reached[seed] = first_reaching(curve, target, unreached)
    row.lower[seed] = first_reaching(curve, target - 0.1, unreached)
    row.final[seed] = curve[#curve][2]
    row.mb = row.mb + mb / seeds
    local reach = row.reached[seed]
    io.stderr:write(string.format("%s, seed %d: %s %s %.2f, final %.4f (%s)\n", v.label, seed, tostring(reach),
                                  reach == unreached and "before" or "rounds to", target, row.final[seed],
                                  had and string.format("finished before, %d rounds", had)
                                  or string.format("%.0f s", host.clock() - t0)))
  end
end
print(string.format("%d nodes, s = %d, %d local steps of batch 32 a round, Dirichlet alpha = 0.1, cnn, "
                    .. "%d seed(s), up to %d rounds%s (%.0f s)", nodes, s, local_steps, seeds, rounds,
                    #extra > 0 and ", " .. table.concat(extra, ", ") or "", host.clock() - t_all))
print(string.format("| topology | rounds to %.0f %% mean test accuracy (per seed) | rounds to %.0f %% "
                    .. "| final accuracy (mean) | MB sent per node |", target * 100, target * 100 - 10))
print("| --- | --- | --- | --- | --- |")
for _, row in ipairs(rows) do
  local final = 0
  for _, a in ipairs(row.final) do final = final + a / #row.final end
  local reached, lower = {}, {}
  for i, r in ipairs(row.reached) do reached[i], lower[i] = tostring(r), tostring(row.lower[i]) end
  print(string.format("| %s | %s | %s | %.4f | %.1f |", row.label, table.concat(reached, ", "),
                      table.concat(lower, ", "), final, row.mb))
end
