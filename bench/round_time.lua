-- Seconds per round of a finished decentralized run, from rounds 2.. (round 1 pays for the start):
--   seconds_per_round: each node's mean round (its wall_seconds summed over those rounds, divided
--     by their count: the run's pace as its elapsed time shows it), the slowest node's
--   slowest_round_median: for each round the slowest node's wall_seconds, the median over rounds.
--     A maximum over N nodes of a jittery time: biased upward, the more so the fewer nodes share
--     a core (at 16 nodes 4 % above the pace of every node)
--   ready_seconds: the slowest node's time from the command's start to its first round.
-- usage: dpy-lua bench/round_time.lua RUN_DIR NODES
local metrics = require "dpy.metrics"
local dir, nodes = arg[1], tonumber(arg[2])
local worst, pace, ready = {}, 0, 0
for u = 0, nodes - 1 do
  local m = assert(metrics.read(string.format("%s/%d.metrics.json", dir, u))).metrics
  local sum, count = 0, 0
  for _, e in ipairs(m.wall_seconds) do
    worst[e[1]] = math.max(worst[e[1]] or 0, e[2])
    if e[1] >= 2 then sum, count = sum + e[2], count + 1 end
  end
  pace = math.max(pace, count > 0 and sum / count or m.wall_seconds[1][2])
  if m.ready_seconds then ready = math.max(ready, m.ready_seconds[1][2]) end
end
local list = {}
for r = 2, #worst do list[#list + 1] = worst[r] end
table.sort(list)
print(string.format("seconds_per_round %.4f", pace))
print(string.format("slowest_round_median %.4f", list[(#list + 1) // 2] or worst[1]))
print(string.format("ready_seconds %.2f", ready))
