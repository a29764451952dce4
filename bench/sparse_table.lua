-- bench/sparse_table.lua: the README table of bench/sparse from finished run directories: bytes per
-- node per round (sent, the wire's headers included, mean over nodes and rounds), the sparse
-- payload's split, final accuracy (mean over nodes at the last evaluation) and both against the
-- first run (the baseline).
--   build/dpy-lua bench/sparse_table.lua out/.../0_baseline out/.../6_topk ...
local metrics = require "dpy.metrics"
local paths = require "dpy.paths"

local function summary(dir)
  local sent, rounds, acc, accs, split, nodes = 0, 0, 0, 0, { 0, 0, 0 }, 0
  for uid = 0, 1023 do
    local path = string.format("%s/%d.metrics.json", dir, uid)
    if not paths.exists(path) then break end
    local m = assert(metrics.read(path)).metrics
    nodes = nodes + 1
    for _, e in ipairs(m.bytes_sent or {}) do sent, rounds = sent + e[2], rounds + 1 end
    local a = m.test_accuracy
    if a and #a > 0 then acc, accs = acc + a[#a][2], accs + 1 end
    for i, name in ipairs { "sharing_indices_bytes", "sharing_values_bytes", "sharing_header_bytes" } do
      for _, e in ipairs(m[name] or {}) do split[i] = split[i] + e[2] end
    end
  end
  assert(nodes > 0, dir .. ": no metrics")
  return { bytes = sent / rounds, acc = acc / accs, split = split, rounds = rounds / nodes, encodings = rounds }
end

local rows = {}
for i, dir in ipairs(arg) do rows[i] = { name = dir:match("([^/]+)/*$"), s = summary(dir) } end
local base = rows[1].s
print("| run | rounds | bytes/node/round | fewer bytes than " .. rows[1].name .. " | final accuracy | "
      .. "vs " .. rows[1].name .. " (points) | payload split: indices / values / header |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for _, r in ipairs(rows) do
  local s, split = r.s, "–"
  local total = s.split[1] + s.split[2] + s.split[3]
  if total > 0 then
    split = string.format("%.0f %% / %.0f %% / %.2f %%", 100 * s.split[1] / total, 100 * s.split[2] / total,
                          100 * s.split[3] / total)
  end
  -- rounds: the mean over nodes (a run stopped early may end its nodes a round apart)
  local rounds = math.tointeger(s.rounds) or string.format("%.1f", s.rounds)
  print(string.format("| %s | %s | %s | %.1f× | %.4f | %+.2f | %s |", r.name, rounds,
                      tostring(math.floor(s.bytes + 0.5)):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""),
                      base.bytes / s.bytes, s.acc, 100 * (s.acc - base.acc), split))
end
-- issue 16's marks: fewer bytes than the first run, within so many points of its accuracy
local marks = { ["6_topk"] = { 8, 1 }, ["7_choco"] = { 30, 2 } }
for _, r in ipairs(rows) do
  local mark = marks[r.name]
  if mark then
    print(string.format("figure %s_fewer_bytes %.1f >= %d", r.name, base.bytes / r.s.bytes, mark[1]))
    print(string.format("figure %s_accuracy_points_below %.2f <= %d", r.name, 100 * (base.acc - r.s.acc), mark[2]))
  end
end
