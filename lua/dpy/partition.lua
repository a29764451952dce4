--- dpy.partition: splitting a dataset's samples among nodes, seeded and deterministic.
-- Each partitioner takes the labels (a tensor or a Lua list of class ids), the number of nodes
-- and options, and returns a list with one int64 tensor of sample indices (0-based) per node:
-- parts[uid + 1] belongs to node uid. dpy.partitioners names them for configs.
local tensor = require "dpy.tensor"
local random = require "dpy.random"
local options = require "dpy.options"
local partitioners = require "dpy.partitioners"

local M = {}

local function label_list(labels)
  if tensor.is_tensor(labels) then return labels:long():totable() end
  return labels
end

local function to_tensors(lists)
  local parts = {}
  for i, l in ipairs(lists) do
    table.sort(l)
    parts[i] = #l > 0 and tensor.new(l, "int64") or tensor.empty(0, "int64")
  end
  return parts
end

local function check_nodes(nodes, n, what)
  options.check_type(nodes, "integer", what .. ": nodes", 3)
  if nodes < 1 then error(what .. ": nodes must be >= 1", 3) end
  if n < nodes then error(string.format("%s: %d samples cannot give each of %d nodes one", what, n, nodes), 3) end
end

-- Cuts list into `nodes` contiguous parts of near-equal size (the first get one more).
local function cut(list, nodes)
  local lists, base, extra, pos = {}, #list // nodes, #list % nodes, 1
  for k = 1, nodes do
    local size = base + (k <= extra and 1 or 0)
    lists[k] = table.move(list, pos, pos + size - 1, 1, {})
    pos = pos + size
  end
  return lists
end

--- partition.iid(labels, nodes [, {seed = 0}]): a seeded shuffle cut into equal parts (the
-- first n % nodes parts get one more sample)
function M.iid(labels, nodes, opts)
  opts = options.check(opts or {}, partitioners.OPTIONS.iid, "partition.iid", 2)
  local y = label_list(labels)
  check_nodes(nodes, #y, "partition.iid")
  local order = {}
  for i = 1, #y do order[i] = i - 1 end
  random.new(opts.seed or 0):shuffle(order)
  return to_tensors(cut(order, nodes))
end

local function by_class(y)
  local classes, ids = {}, {}
  for i, c in ipairs(y) do
    if not classes[c] then
      classes[c] = {}
      ids[#ids + 1] = c
    end
    local l = classes[c]
    l[#l + 1] = i - 1
  end
  table.sort(ids)
  return classes, ids
end

--- partition.dirichlet(labels, nodes, {alpha, seed = 0, min_size = 1}): for each class,
-- proportions over the nodes drawn from Dirichlet(alpha) (small alpha: skewed label mixes);
-- redrawn until every node has min_size samples
function M.dirichlet(labels, nodes, opts)
  opts = options.check(opts or {}, partitioners.OPTIONS.dirichlet, "partition.dirichlet", 2)
  options.check_type(opts.alpha, "number", "partition.dirichlet: alpha", 2)
  if opts.alpha <= 0 then error("partition.dirichlet: alpha must be > 0", 2) end
  local y = label_list(labels)
  check_nodes(nodes, #y, "partition.dirichlet")
  local min_size = opts.min_size or 1
  local rng = random.new(opts.seed or 0)
  local classes, ids = by_class(y)
  for _ = 1, 1000 do
    local lists = {}
    for k = 1, nodes do lists[k] = {} end
    for _, c in ipairs(ids) do
      local idx = rng:shuffle(table.move(classes[c], 1, #classes[c], 1, {}))
      local p = rng:dirichlet(opts.alpha, nodes)
      local pos, acc = 1, 0
      for k = 1, nodes do
        acc = acc + p[k]
        local stop = k == nodes and #idx or math.floor(acc * #idx + 0.5)
        for j = pos, stop do lists[k][#lists[k] + 1] = idx[j] end
        pos = math.max(pos, stop + 1)
      end
    end
    local smallest = math.huge
    for k = 1, nodes do smallest = math.min(smallest, #lists[k]) end
    if smallest >= min_size then return to_tensors(lists) end
  end
  error(string.format("partition.dirichlet: no draw gave every one of %d nodes %d samples "
                      .. "(alpha %g too small?)", nodes, min_size, opts.alpha), 2)
end

--- partition.shards(labels, nodes, {shards_per_node = 2, seed = 0}): samples sorted by label,
-- cut into nodes * shards_per_node shards, each node given shards_per_node at random (the
-- pathological non-IID split of McMahan et al.)
function M.shards(labels, nodes, opts)
  opts = options.check(opts or {}, partitioners.OPTIONS.shards, "partition.shards", 2)
  local k = opts.shards_per_node or 2
  options.check_type(k, "integer", "partition.shards: shards_per_node", 2)
  local y = label_list(labels)
  check_nodes(nodes, #y, "partition.shards")
  if #y < nodes * k then   -- every shard needs a sample: name the shards, not the nodes
    error(string.format("partition.shards: %d samples cannot give each of %d shards one (%d nodes x %d "
                        .. "shards_per_node)", #y, nodes * k, nodes, k), 2)
  end
  local classes, ids = by_class(y)
  local sorted = {}
  for _, c in ipairs(ids) do table.move(classes[c], 1, #classes[c], #sorted + 1, sorted) end
  local nshards = nodes * k
  local shard_ids = {}
  for s = 1, nshards do shard_ids[s] = s end
  random.new(opts.seed or 0):shuffle(shard_ids)
  local lists, size = {}, #sorted // nshards
  for node = 1, nodes do
    local l = {}
    for j = 1, k do
      local s = shard_ids[(node - 1) * k + j]
      local first = (s - 1) * size + 1
      local last = s == nshards and #sorted or s * size
      table.move(sorted, first, last, #l + 1, l)
    end
    lists[node] = l
  end
  return to_tensors(lists)
end

--- partition.gamma_similarity(labels, nodes, {gamma, seed = 0}): a fraction gamma of the samples
-- (a seeded choice) split IID, the rest sorted by label and cut into contiguous parts: gamma = 1
-- is IID, gamma = 0 gives each node a few classes (as in Karimireddy et al.'s Byzantine studies)
function M.gamma_similarity(labels, nodes, opts)
  opts = options.check(opts or {}, partitioners.OPTIONS.gamma_similarity, "partition.gamma_similarity", 2)
  local gamma = opts.gamma
  if type(gamma) ~= "number" or gamma < 0 or gamma > 1 then
    error("partition.gamma_similarity: gamma must be a number in [0, 1]", 2)
  end
  local y = label_list(labels)
  check_nodes(nodes, #y, "partition.gamma_similarity")
  local order = {}
  for i = 1, #y do order[i] = i - 1 end
  random.new(opts.seed or 0):shuffle(order)
  local n_iid = math.floor(gamma * #y + 0.5)
  local iid = cut(table.move(order, 1, n_iid, 1, {}), nodes)
  local rest = table.move(order, n_iid + 1, #y, 1, {})
  table.sort(rest, function(a, b)
    if y[a + 1] ~= y[b + 1] then return y[a + 1] < y[b + 1] end
    return a < b
  end)
  local sorted = cut(rest, nodes)
  for k = 1, nodes do table.move(sorted[k], 1, #sorted[k], #iid[k] + 1, iid[k]) end
  return to_tensors(iid)
end

--- partition.class_list(labels, nodes, {classes = { {0, 1}, {2, 3}, ... }, seed = 0}): node k gets
-- an equal share of the samples of each class in classes[k] (a class listed by several nodes is
-- split among them at random)
function M.class_list(labels, nodes, opts)
  opts = options.check(opts or {}, partitioners.OPTIONS.class_list, "partition.class_list", 2)
  local lists_of = opts.classes
  if type(lists_of) ~= "table" or #lists_of ~= nodes then
    error(string.format("partition.class_list: classes must list one class list per node (%d)", nodes), 2)
  end
  local y = label_list(labels)
  local by, ids = by_class(y)
  local known = {}
  for _, c in ipairs(ids) do known[c] = true end
  local holders = {}
  for k, list in ipairs(lists_of) do
    for _, c in ipairs(list) do
      if not known[c] then
        error(string.format("partition.class_list: node %d lists class %s, which has no samples",
                            k - 1, tostring(c)), 2)
      end
      holders[c] = holders[c] or {}
      table.insert(holders[c], k)
    end
  end
  local rng, lists = random.new(opts.seed or 0), {}
  for k = 1, nodes do lists[k] = {} end
  for _, c in ipairs(ids) do
    if holders[c] then
      local parts = cut(rng:shuffle(table.move(by[c], 1, #by[c], 1, {})), #holders[c])
      for i, k in ipairs(holders[c]) do table.move(parts[i], 1, #parts[i], #lists[k] + 1, lists[k]) end
    end
  end
  for k = 1, nodes do
    if #lists[k] == 0 then error(string.format("partition.class_list: node %d gets no samples", k - 1), 2) end
  end
  return to_tensors(lists)
end

--- partition.natural(groups, nodes [, {assign = "contiguous"}]): the dataset's own split (its
-- groups: FEMNIST's writers, Camelyon17's hospitals; an int64 tensor or a list of group ids, one
-- per sample): a group is never split, and every node gets at least one. With more groups than
-- nodes, assign = "contiguous" cuts the groups, in increasing id order, into nodes runs of near-
-- equal count (the first groups % nodes nodes get one more: node k of G groups and n nodes starts
-- at group k * (G // n) + min(k, G % n)); "balanced" gives the groups, largest first (ties: lower
-- id), each to the node with the fewest samples so far (ties: lower uid). No seed is used.
function M.natural(groups, nodes, opts)
  opts = options.check(opts or {}, { assign = true, seed = true }, "partition.natural", 2)
  if groups == nil then
    error("partition.natural: no groups (the dataset has no natural partition)", 2)
  end
  local g = label_list(groups)
  options.check_type(nodes, "integer", "partition.natural: nodes", 2)
  if nodes < 1 then error("partition.natural: nodes must be >= 1", 2) end
  local members, ids = by_class(g)
  if #ids < nodes then
    error(string.format("partition.natural: %d groups cannot give each of %d nodes one (a group is "
                        .. "never split): use at most %d nodes", #ids, nodes, #ids), 2)
  end
  local assign = opts.assign or "contiguous"
  local lists = {}
  for k = 1, nodes do lists[k] = {} end
  local function give(k, id) table.move(members[id], 1, #members[id], #lists[k] + 1, lists[k]) end
  if assign == "contiguous" then
    for k, run in ipairs(cut(ids, nodes)) do
      for _, id in ipairs(run) do give(k, id) end
    end
  elseif assign == "balanced" then
    local order = table.move(ids, 1, #ids, 1, {})
    table.sort(order, function(a, b)
      if #members[a] ~= #members[b] then return #members[a] > #members[b] end
      return a < b
    end)
    for _, id in ipairs(order) do
      local best = 1
      for k = 2, nodes do
        if #lists[k] < #lists[best] then best = k end
      end
      give(best, id)
    end
  else
    error(string.format("partition.natural: assign must be 'contiguous' or 'balanced', got %s",
                        tostring(assign)), 2)
  end
  return to_tensors(lists)
end

return M
