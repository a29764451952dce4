-- Seconds per round of a finished decentralized run: for each round, the slowest node's
-- wall_seconds; prints the median over rounds 2.. (round 1 pays for the start), and the
-- slowest node's ready_seconds (command start to its first round).
-- usage: dpy-lua bench/round_time.lua RUN_DIR NODES
local metrics = require "dpy.metrics"
local dir, nodes = arg[1], tonumber(arg[2])
local worst, ready = {}, 0
for u = 0, nodes - 1 do
  local m = assert(metrics.read(string.format("%s/%d.metrics.json", dir, u))).metrics
  for _, e in ipairs(m.wall_seconds) do worst[e[1]] = math.max(worst[e[1]] or 0, e[2]) end
  if m.ready_seconds then ready = math.max(ready, m.ready_seconds[1][2]) end
end
local list = {}
for r = 2, #worst do list[#list + 1] = worst[r] end
table.sort(list)
print(string.format("seconds_per_round %.4f", list[(#list + 1) // 2] or worst[1]))
print(string.format("ready_seconds %.2f", ready))
