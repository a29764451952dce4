--- dpy.layout_files: the two files of a run's layout that every node reads, graph.json and
-- partition.pt (dpy.layout checks the config and writes them). Apart from dpy.layout, so that a
-- node's build does not load the launcher's checks (19 KB of bytecode a node).
local tensor = require "dpy.tensor"
local metrics = require "dpy.metrics"
local paths = require "dpy.paths"

local M = {}

-- graph.json holds one line per node, padded to one width, after a first line that gives it:
-- node u's list is at a known offset, and a node reads only the lists it uses (at 8192 nodes
-- every node decoding all of them was O(n^2) time in all and a MiB of Lua heap a node). Whitespace
-- in JSON: any reader still decodes it whole. Past 64 MiB padded (a dense graph) it is compact.
local PADDED_MAX = 64 << 20

--- layout_files.write_graph(dir, g [, dynamic [, directed]]): dir/graph.json, { n, adj = the lists by uid
-- + 1, dynamic, directed }.
function M.write_graph(dir, g, dynamic, directed)
  local lists, width = {}, 0
  for u = 0, g.n - 1 do
    lists[u + 1] = metrics.json.encode(g.adj[u])
    width = math.max(width, #lists[u + 1] + 2)   -- the list, "," or " ", "\n"
  end
  local path = dir .. "/graph.json"
  if width * g.n > PADDED_MAX then
    local adj = {}
    for u = 0, g.n - 1 do adj[u + 1] = g.adj[u] end
    paths.write(path, metrics.json.encode({ n = g.n, adj = adj, dynamic = dynamic, directed = directed }))
    return
  end
  local out = { string.format('{"n":%d,%s%s"width":%d,"adj":[\n', g.n, dynamic and '"dynamic":true,' or "",
                              directed and '"directed":true,' or "", width) }
  for u = 1, g.n do
    out[u + 1] = lists[u] .. (u < g.n and "," or " ") .. string.rep(" ", width - #lists[u] - 2) .. "\n"
  end
  out[#out + 1] = "]}\n"
  paths.write(path, table.concat(out))
end

local function decode_list(s)
  local list = {}
  for v in s:gmatch("%d+") do list[#list + 1] = math.tointeger(tonumber(v)) end
  return list
end

--- The graph written by prepare: { n, adj = { [uid] = neighbours }, dynamic, directed }. A padded file's
-- lists are read as they are first indexed (so pairs() over adj sees only those read so far).
function M.load_graph(dir)
  local path = dir .. "/graph.json"
  local f, err = io.open(path, "rb")
  if not f then error(err, 0) end
  local head = f:read("l") or ""
  f:close()
  local width = math.tointeger(tonumber(head:match('"width":(%d+)')))
  if not width then
    local t = assert(metrics.read(path))
    local adj = {}
    for i, list in ipairs(t.adj) do   -- uids as integers (JSON numbers decode as floats)
      local uids = {}
      for j, v in ipairs(list) do uids[j] = math.tointeger(v) end
      adj[i - 1] = uids
    end
    return { n = math.tointeger(t.n), adj = adj, dynamic = t.dynamic, directed = t.directed }
  end
  local n, base = math.tointeger(tonumber(head:match('"n":(%d+)'))), #head + 1
  local adj = setmetatable({}, { __index = function(t, key)
    local u = math.tointeger(key)
    if not u or u < 0 or u >= n then return nil end
    local h, why = io.open(path, "rb")
    if not h then error(why, 0) end
    assert(h:seek("set", base + u * width))
    local list = decode_list(assert(h:read(width)))
    h:close()
    t[u] = list
    return list
  end })
  return { n = n, adj = adj, dynamic = head:find('"dynamic":true', 1, true) and true or nil,
           directed = head:find('"directed":true', 1, true) and true or nil }
end

--- layout_files.write_parts(dir, parts): dir/partition.pt, the int64 sample indices of each
-- training part (a list of tensors) in one tensor: the parts' bounds (#parts + 1 offsets), then
-- the parts one after another.
function M.write_parts(dir, parts)
  local offsets, flat = { 0 }, {}
  for i, p in ipairs(parts) do
    offsets[i + 1] = offsets[i] + p:numel()
    flat[i] = p
  end
  local packed = tensor.cat { tensor.new(offsets, "int64"), tensor.cat(flat) }
  assert(packed:save(dir .. "/partition.pt"))
end

--- The int64 sample indices of training part k (1-based) from partition.pt, read once per
-- process (tensor.load_shared). Every view is closed at once, and the part cloned: nothing of
-- the node's keeps the whole partition alive.
function M.load_part(dir, k, parts_n)
  local packed <close> = assert(tensor.load_shared(dir .. "/partition.pt"))
  local bounds <close> = packed:narrow(0, k - 1, 2)
  local a, b = table.unpack(bounds:totable())
  local part <close> = packed:narrow(0, parts_n + 1 + a, b - a)
  return part:clone()
end

return M
