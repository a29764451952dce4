-- Stragglers on a simulated clock: synchronous D-PSGD against deadline rounds, with a seeded 10 %
-- of the nodes 4 times slower (configs/stragglers.lua's network: a local step 0.05 simulated
-- seconds, 5 to 20 ms per link), on the baseline's 4-regular graph and IID Fashion-MNIST. Prints a
-- Markdown table of the simulated seconds until the nodes' mean test accuracy reaches TARGET: the
-- mean, at a simulated time, of each node's latest evaluation by then (with deadlines the nodes are
-- at different rounds at one time: the fast ones do not wait for the stragglers).
--   scripts/dpy configs/stragglers/compare.lua [NODES [ROUNDS [LOCAL_STEPS [TARGET [TIMEOUT [CLOCK]]]]]]
-- (defaults 16 30 5 0.8 0.3 sim; TIMEOUT: the deadline rounds' round_timeout, in simulated seconds)
-- CLOCK "real": no simulated clock; the stragglers are emulated in real time (a slow node waits
-- (factor - 1) x its training time, without a compute slot), TIMEOUT is in wall seconds, and
-- asynchronous gossip (configs/async.lua's push-sum, which the simulated clock does not model)
-- joins the table; times are wall seconds from the command's start on this machine.
local host = require "dpy.host.core"
local metrics = require "dpy.metrics"
local paths = require "dpy.paths"

local nodes = math.tointeger(tonumber(arg and arg[1])) or 16
local rounds = math.tointeger(tonumber(arg and arg[2])) or 30
local local_steps = math.tointeger(tonumber(arg and arg[3])) or 5
local target = tonumber(arg and arg[4]) or 0.8
local timeout = tonumber(arg and arg[5]) or 0.3
local clock = arg and arg[6] or "sim"
if clock ~= "sim" and clock ~= "real" then error("compare.lua: CLOCK is sim or real, not " .. clock, 0) end
local real = clock == "real"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
-- real time: the baseline with configs/stragglers.lua's stragglers, no simulated clock
local base = paths.absolute(here .. (real and "/../0_baseline.lua" or "/../stragglers.lua"))
local work = string.format("%s/dpy_stragglers_%d_%d", os.getenv("TMPDIR") or "/tmp", os.time(), host.pid())
assert(host.mkdir_p(work))

local variants = {
  { label = "synchronous D-PSGD", lines = "" },
  { label = string.format("deadline rounds (round_timeout = %g)", timeout),
    lines = string.format("round_timeout = %.17g\n", timeout) },
}
if real then variants[#variants + 1] = { label = "asynchronous gossip (push-sum)", lines = 'algorithm = "async"\n' } end

-- A node's time at the end of each of its rounds: simulated, or (real) the wall seconds from the
-- command's start (its time to its first round, then its rounds' wall times).
local function times(m)
  local at = {}
  if not real then
    for _, e in ipairs(m.sim_seconds) do at[e[1]] = e[2] end
    return at
  end
  local t = m.ready_seconds[1][2]
  for _, e in ipairs(m.wall_seconds) do
    t = t + e[2]
    at[e[1]] = t
  end
  return at
end

-- { time, mean over the nodes of their latest test accuracy by then } at every evaluation once
-- each node has one, in time order; and the late models
local function read_run(dir)
  local events, late = {}, 0
  for uid = 0, nodes - 1 do
    local m = assert(metrics.read(string.format("%s/%d.metrics.json", dir, uid))).metrics
    local sim = times(m)
    for _, e in ipairs(m.test_accuracy or {}) do events[#events + 1] = { sim[e[1]], uid, e[2] } end
    for _, e in ipairs(m.late_messages or {}) do late = late + e[2] end
  end
  table.sort(events, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  local latest, have, sum, curve = {}, 0, 0, {}
  for _, e in ipairs(events) do
    if not latest[e[2]] then have = have + 1 end
    sum = sum - (latest[e[2]] or 0) + e[3]
    latest[e[2]] = e[3]
    if have == nodes then curve[#curve + 1] = { e[1], sum / nodes } end
  end
  return curve, late
end

local bin = host.exe()
local t_all = host.clock()
local lines = {}
for _, v in ipairs(variants) do
  local dir = string.format("%s/%s", work, v.label:gsub("%W", "_"))
  local cfg = dir .. ".lua"
  local f = assert(io.open(cfg, "w"))
  f:write(string.format("include %q\nnodes = %d\nrounds = %d\nlocal_steps = %d\neval_every = 5\n"
                        .. "test_samples = 2000\n%s%s", base, nodes, rounds, local_steps,
                        real and "stragglers = { fraction = 0.1, slowdown = 4 }\n" or "", v.lines))
  f:close()
  -- forked from this process, libraries loaded (host.spawn), as dpy-lua run starts its processes
  local pid = assert(host.spawn({ bin, "run", cfg, "--out", dir, "-q" }, dir .. ".out"))
  if host.wait(pid) ~= 0 then
    error(string.format("%s: the run failed (see %s.out)", v.label, dir), 0)
  end
  local curve, late = read_run(dir)
  local reached = string.format(">%.1f", curve[#curve][1])
  for _, e in ipairs(curve) do
    if e[2] >= target then
      reached = string.format("%.1f", e[1])
      break
    end
  end
  lines[#lines + 1] = string.format("| %s | %s | %.4f | %.1f | %d |", v.label, reached, curve[#curve][2],
                                    curve[#curve][1], late)
  io.stderr:write(lines[#lines], "\n")
end
local unit = real and "wall seconds" or "simulated seconds"
print(string.format("%d nodes, 10 %% of them 4x slower (%s), %d local steps a round, up to %d rounds (%.0f s)",
                    nodes, real and "in real time" or "on a simulated clock", local_steps, rounds,
                    host.clock() - t_all))
print(string.format("| rounds | %s to %.0f %% mean test accuracy | final accuracy | %s at the last node's end "
                    .. "| late models |", unit, target * 100, unit))
print("| --- | --- | --- | --- | --- |")
for _, l in ipairs(lines) do print(l) end
