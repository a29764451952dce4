--- dpy.honest: which nodes of a run count as honest — the one definition behind the end-of-run
-- summary's and `dpy-lua report`'s accuracy. Honest: every node but those that an action recorded
-- in the run's manifest.json under a key of LEFT_OUT (actions.label_flipping.poisoned,
-- actions.byzantine_attack.byzantine).
local metrics = require "dpy.metrics"

local M = {}

M.LEFT_OUT = { "byzantine", "poisoned" }

--- honest.of_manifest(manifest, nodes, [where = "manifest.json"]) -> h | nil, err, where h =
-- { nodes, count, uids = sorted honest uids, set = { [uid] = true }, left_out = sorted list of
-- { action, key, uids } }
function M.of_manifest(manifest, nodes, where)
  where = where or "manifest.json"
  local out, groups = {}, {}
  local names = {}
  for name in pairs(type(manifest.actions) == "table" and manifest.actions or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local entry = manifest.actions[name]
    for _, key in ipairs(M.LEFT_OUT) do
      local list = type(entry) == "table" and entry[key]
      if list then
        local what = string.format("%s: actions.%s.%s", where, name, key)
        if type(list) ~= "table" then return nil, what .. " must be a list of uids" end
        local uids = {}
        for _, u in ipairs(list) do
          local uid = type(u) == "number" and math.tointeger(u) or nil
          if not uid or uid < 0 or uid >= nodes then
            return nil, string.format("%s lists %s, not a node (0..%d)", what, tostring(uid or u), nodes - 1)
          end
          uids[#uids + 1] = uid
          out[uid] = true
        end
        table.sort(uids)
        if #uids > 0 then groups[#groups + 1] = { action = name, key = key, uids = uids } end
      end
    end
  end
  local h = { nodes = nodes, uids = {}, set = {}, left_out = groups }
  for uid = 0, nodes - 1 do
    if not out[uid] then
      h.uids[#h.uids + 1] = uid
      h.set[uid] = true
    end
  end
  h.count = #h.uids
  return h
end

--- honest.of_run(dir, nodes) -> h (see of_manifest) | nil, err: from dir/manifest.json
function M.of_run(dir, nodes)
  local path = dir .. "/manifest.json"
  local manifest, err = metrics.read(path)
  if not manifest then return nil, err:find(path, 1, true) and err or path .. ": " .. err end
  return M.of_manifest(manifest, nodes, path)
end

--- honest.describe(h) -> "honest nodes: 13 of 16 (left out: 4, 11, 14 poisoned by label_flipping)"
function M.describe(h)
  local parts = {}
  for _, g in ipairs(h.left_out) do
    local uids = {}
    for i, u in ipairs(g.uids) do uids[i] = tostring(u) end
    parts[#parts + 1] = string.format("%s %s by %s", table.concat(uids, ", "), g.key, g.action)
  end
  return string.format("honest nodes: %d of %d%s", h.count, h.nodes,
                       #parts > 0 and " (left out: " .. table.concat(parts, "; ") .. ")" or "")
end

return M
