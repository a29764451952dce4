--- dpy.graph: topologies. A graph is { n = nodes, adj = { [uid] = sorted list of neighbour
-- uids } } over uids 0 .. n - 1, undirected. Every generator is seeded and deterministic, so all
-- nodes build the same graph without talking. The graphs a config names are in lua/dpy/graphs/.
local random = require "dpy.random"
local tensor = require "dpy.tensor"
local options = require "dpy.options"
local mixing = require "dpy.mixing"

local M = {}

local function new(n)
  local adj = {}
  for u = 0, n - 1 do adj[u] = {} end
  return { n = n, adj = adj, _set = {} }
end

local function key(u, v) return u < v and u * 1048576 + v or v * 1048576 + u end

local function add_edge(g, u, v)
  if u == v or g._set[key(u, v)] then return false end
  g._set[key(u, v)] = true
  local au, av = g.adj[u], g.adj[v]
  au[#au + 1] = v
  av[#av + 1] = u
  return true
end

-- The arc u -> v (directed graph files): only u lists v.
local function add_arc(g, u, v)
  local k = u * 1048576 + v
  if u == v or g._set[k] then return false end
  g._set[k] = true
  local au = g.adj[u]
  au[#au + 1] = v
  return true
end

local function finish(g)
  for u = 0, g.n - 1 do table.sort(g.adj[u]) end
  g._set = nil
  return g
end

local function check_n(n, what, min)
  options.check_type(n, "integer", what .. ": nodes", 3)
  if n < (min or 1) then error(string.format("%s needs at least %d nodes", what, min or 1), 3) end
end

--- graph.ring(n): each node linked to the next and the previous
function M.ring(n)
  check_n(n, "ring")
  local g = new(n)
  for u = 0, n - 1 do add_edge(g, u, (u + 1) % n) end
  return finish(g)
end

--- graph.torus(rows, cols [, wrap = true]): a grid; wrap = false gives a plain grid
function M.torus(rows, cols, wrap)
  local n = rows * cols
  check_n(n, "torus")
  local g = new(n)
  for r = 0, rows - 1 do
    for c = 0, cols - 1 do
      local u = r * cols + c
      if c + 1 < cols or (wrap ~= false and cols > 2) then add_edge(g, u, r * cols + (c + 1) % cols) end
      if r + 1 < rows or (wrap ~= false and rows > 2) then add_edge(g, u, ((r + 1) % rows) * cols + c) end
    end
  end
  return finish(g)
end

--- graph.full(n): every pair linked
function M.full(n)
  check_n(n, "full")
  local g = new(n)
  for u = 0, n - 1 do
    for v = u + 1, n - 1 do add_edge(g, u, v) end
  end
  return finish(g)
end

--- graph.star(n [, center = 0])
function M.star(n, center)
  check_n(n, "star")
  center = center or 0
  if center < 0 or center >= n then error(string.format("star: center %s is not a node (0..%d)", center, n - 1), 2) end
  local g = new(n)
  for u = 0, n - 1 do add_edge(g, center, u) end
  return finish(g)
end

--- graph.regular(n, d, seed): a random d-regular graph (half-edges paired at random, redrawn until
-- simple and connected)
function M.regular(n, d, seed)
  check_n(n, "regular")
  options.check_type(d, "integer", "regular: degree", 2)
  if d >= n or (n * d) % 2 ~= 0 then
    error(string.format("regular: no %d-regular graph on %d nodes (need degree < nodes, nodes * degree even)", d, n), 2)
  end
  local rng = random.new(seed or 0)
  for _ = 1, 1000 do
    local g, ok = new(n), true
    local ends = {}   -- d half-edges per node, paired at random
    for u = 0, n - 1 do
      for _ = 1, d do ends[#ends + 1] = u end
    end
    rng:shuffle(ends)
    -- pair greedily, re-drawing a partner when it would make a loop or a double edge
    while #ends > 0 and ok do
      local u = table.remove(ends)
      ok = false
      for _ = 1, 50 do
        local j = rng:int(#ends) + 1
        if ends[j] ~= u and add_edge(g, u, ends[j]) then
          ends[j] = ends[#ends]
          ends[#ends] = nil
          ok = true
          break
        end
      end
    end
    if ok and M.connected(finish(g)) then return g end
  end
  error(string.format("regular: could not draw a connected %d-regular graph on %d nodes", d, n), 2)
end

--- graph.erdos_renyi(n, p, seed): each pair linked with probability p (redrawn until connected)
function M.erdos_renyi(n, p, seed)
  check_n(n, "erdos_renyi")
  local rng = random.new(seed or 0)
  for _ = 1, 1000 do
    local g = new(n)
    for u = 0, n - 1 do
      for v = u + 1, n - 1 do
        if rng:uniform() < p then add_edge(g, u, v) end
      end
    end
    if M.connected(finish(g)) then return g end
  end
  error(string.format("erdos_renyi: p = %g gives no connected graph on %d nodes", p, n), 2)
end

--- graph.small_world(n, k, beta, seed): Watts-Strogatz: a ring lattice of k neighbours (k even)
-- whose edges are rewired with probability beta (redrawn until connected)
function M.small_world(n, k, beta, seed)
  check_n(n, "small_world")
  if k % 2 ~= 0 or k >= n then error("small_world: k must be even and below the node count", 2) end
  local rng = random.new(seed or 0)
  for _ = 1, 1000 do
    local g = new(n)
    for u = 0, n - 1 do
      for j = 1, k // 2 do
        local v = (u + j) % n
        -- a node already linked to every other keeps its lattice edge (as networkx's
        -- watts_strogatz_graph skips that rewiring): no w would ever do
        if rng:uniform() < beta and #g.adj[u] < n - 1 then
          local w
          repeat w = rng:int(n) until w ~= u and not g._set[key(u, w)]
          v = w
        end
        add_edge(g, u, v)
      end
    end
    if M.connected(finish(g)) then return g end
  end
  error("small_world: no connected graph drawn", 2)
end

-- {==== directed graphs: the round graphs of Epidemic Learning ====}
-- A directed graph is { n, out = { [uid] = sorted uids it sends to }, from = { [uid] = sorted
-- uids it receives from } }, without self-loops or double arcs.

local function directed(n, out)
  local from = {}
  for u = 0, n - 1 do from[u] = {} end
  for u = 0, n - 1 do
    table.sort(out[u])
    for _, v in ipairs(out[u]) do from[v][#from[v] + 1] = u end   -- u ascending: sorted
  end
  return { n = n, out = out, from = from }
end

local function check_out_degree(n, s, what)
  options.check_type(s, "integer", what .. ": out-degree", 3)
  if s < 1 then error(string.format("%s: out-degree must be at least 1, got %d", what, s), 3) end
  if s >= n then error(string.format("%s: out-degree %d needs more than %d nodes", what, s, n), 3) end
end

--- graph.regular_directed(n, s, seed) -> a random directed graph in which every node sends to s
-- others and receives from s (EL-Oracle's round graph): s incoming half-edges per node dealt at random
-- to the outgoing ones, then each self-loop or double arc repaired by swapping its target with a random
-- other arc's where both arcs come out new.
function M.regular_directed(n, s, seed)
  check_n(n, "regular_directed")
  check_out_degree(n, s, "regular_directed")
  local out = {}
  for u = 0, n - 1 do out[u] = {} end
  if s == n - 1 then   -- the complete digraph, the only one
    for u = 0, n - 1 do
      for v = 0, n - 1 do if v ~= u then out[u][#out[u] + 1] = v end end
    end
    return directed(n, out)
  end
  local rng = random.new(seed or 0)
  local owner, target, count = {}, {}, {}   -- arc i: owner[i] -> target[i]; count[u * n + v]: arcs u -> v
  for u = 0, n - 1 do
    for _ = 1, s do
      owner[#owner + 1] = u
      target[#target + 1] = u
    end
  end
  rng:shuffle(target)
  for i = 1, #owner do
    local k = owner[i] * n + target[i]
    count[k] = (count[k] or 0) + 1
  end
  local m = #owner
  for i = 1, m do
    local tries = 0
    while owner[i] == target[i] or count[owner[i] * n + target[i]] > 1 do
      tries = tries + 1
      if tries > 100 * m then
        error(string.format("regular_directed: could not draw a %d-regular digraph on %d nodes", s, n), 2)
      end
      local j = rng:int(m) + 1
      local u, v, w, x = owner[i], target[i], owner[j], target[j]
      -- u -> x and w -> v must both be new arcs (a swap never spoils a repaired arc)
      if u ~= w and x ~= u and v ~= w and not count[u * n + x] and not count[w * n + v] then
        count[u * n + v] = count[u * n + v] > 1 and count[u * n + v] - 1 or nil
        count[w * n + x] = count[w * n + x] > 1 and count[w * n + x] - 1 or nil
        count[u * n + x], count[w * n + v] = 1, 1
        target[i], target[j] = x, v
      end
    end
  end
  for i = 1, m do out[owner[i]][#out[owner[i]] + 1] = target[i] end
  return directed(n, out)
end

--- graph.random_targets(n, s, seed, u) -> the s distinct nodes other than u that u draws
-- uniformly (sorted), from its own stream (seed, u): EL-Local's choice of node u.
function M.random_targets(n, s, seed, u)
  check_out_degree(n, s, "random_targets")
  local rng = random.new((seed or 0) * 1000003 + u)
  local chosen, list = {}, {}
  while #list < s do
    local v = rng:int(n - 1)
    if v >= u then v = v + 1 end   -- every node but u
    if not chosen[v] then
      chosen[v] = true
      list[#list + 1] = v
    end
  end
  table.sort(list)
  return list
end

--- graph.random_out(n, s, seed) -> the directed graph of every node's random_targets (EL-Local's
-- round graph: out-degree s, in-degrees as they fall)
function M.random_out(n, s, seed)
  check_n(n, "random_out")
  check_out_degree(n, s, "random_out")
  local out = {}
  for u = 0, n - 1 do out[u] = M.random_targets(n, s, seed, u) end
  return directed(n, out)
end

-- {==== DecentralizePy's graph files (its Graph.read_graph_from_file) ====}
-- Line 1 is the node count n. Then, as an edge list ("edges"), one "u v" per line (an undirected
-- edge; its writer lists each twice); as an adjacency list ("adjacency"), exactly n lines, line
-- k + 2 the neighbours of node k (empty for none). Both are read as undirected graphs, so an
-- adjacency list must be symmetric.

local FORMATS = { edges = true, adjacency = true }

local function snippet(line)
  line = line:match("^%s*(.-)%s*$")
  return #line > 40 and line:sub(1, 37) .. "..." or line
end

-- The node ids of a line, or nil, message.
local function ids(line, n)
  local list = {}
  for tok in line:gmatch("%S+") do
    if not tok:match("^[+-]?%d+$") then return nil, string.format("'%s' is not a node id", snippet(tok)) end
    local v = math.tointeger(tonumber(tok))   -- nil past 2^63
    if not v or v < 0 or v >= n then return nil, string.format("node %s out of range 0..%d", tok, n - 1) end
    list[#list + 1] = v
  end
  return list
end

-- Each reader returns the graph, or nil, the line number and a message; arcs: the lines are
-- arcs ("u v": u sends to v; line k + 2: the nodes k sends to), none required both ways.
local function read_edges(lines, n, arcs)
  local g = new(n)
  for i = 2, #lines do
    local _, count = lines[i]:gsub("%S+", "")
    if count ~= 2 then
      return nil, i, count > 0 and string.format("expected 'u v', got '%s'", snippet(lines[i]))
                     or "expected 'u v', got an empty line"
    end
    local pair, err = ids(lines[i], n)
    if not err and pair[1] == pair[2] then err = string.format("a self-loop at node %d", pair[1]) end
    if err then return nil, i, err end
    if arcs then add_arc(g, pair[1], pair[2]) else add_edge(g, pair[1], pair[2]) end
  end
  return finish(g)
end

local function read_adjacency(lines, n, arcs)
  local rows = #lines - 1
  if rows < n then return nil, #lines, string.format("the file ends after %d of %d nodes' lines", rows, n) end
  if rows > n then return nil, n + 2, string.format("a line past the last node's (%d nodes)", n) end
  local lists, listed = {}, {}
  for u = 0, n - 1 do
    local list, err = ids(lines[u + 2], n)
    if not list then return nil, u + 2, err end
    listed[u] = {}
    for _, v in ipairs(list) do
      if v == u then return nil, u + 2, string.format("a self-loop at node %d", u) end
      listed[u][v] = true
    end
    lists[u] = list
  end
  local g = new(n)
  for u = 0, n - 1 do
    for _, v in ipairs(lists[u]) do
      if arcs then
        add_arc(g, u, v)
      elseif not listed[v][u] then
        return nil, u + 2, string.format("node %d lists %d, but node %d (line %d) does not list %d",
                                         u, v, v, v + 2, u)
      else
        add_edge(g, u, v)
      end
    end
  end
  return finish(g)
end

local READERS = { edges = read_edges, adjacency = read_adjacency }

-- The most nodes a graph file may declare when the caller gives no bound (a config passes its
-- nodes): the count comes before anything is built for it.
M.MAX_FILE_NODES = 1000000

--- graph.from_file(path [, format [, max_nodes]]) -> graph: a DecentralizePy graph file, format
-- "edges" or "adjacency"; without one, the format the content allows (raises when it allows both
-- and they differ, as a ring's adjacency list and a one-direction edge list do). Raises on a file
-- it cannot read, on more than max_nodes nodes (default M.MAX_FILE_NODES) and on bad content,
-- naming the file and line. arcs: its lines are arcs (see read_edges), for a rule that takes a
-- directed graph.
function M.from_file(path, format, max_nodes, limit_name, arcs)
  if format ~= nil and not FORMATS[format] then
    error(string.format('graph.from_file: format must be "edges" or "adjacency", got %q', tostring(format)), 2)
  end
  local f, err = io.open(path, "r")
  if not f then error("graph file: " .. err, 2) end
  local lines = {}
  for line in f:lines() do lines[#lines + 1] = line end
  f:close()
  local n = lines[1] and math.tointeger(tonumber(lines[1]:match("^%s*(%d+)%s*$")))
  if not n then
    error(string.format("%s:1: expected the node count on the first line, got '%s'", path, snippet(lines[1] or "")), 0)
  end
  if n < 1 then error(string.format("%s:1: a graph needs at least 1 node, the file says %d", path, n), 0) end
  local limit = max_nodes or M.MAX_FILE_NODES
  if n > limit then
    error(string.format("%s:1: the file says %d nodes, more than the limit of %d (%s)", path, n, limit,
                        limit_name or "max_nodes"), 0)
  end
  if format then
    local g, line, msg = READERS[format](lines, n, arcs)
    if not g then error(string.format("%s:%d: %s", path, line, msg), 0) end
    return g
  end
  local e, e_line, e_msg = read_edges(lines, n, arcs)
  local a, a_line, a_msg = read_adjacency(lines, n, arcs)
  if e and a then
    for u = 0, n - 1 do
      if table.concat(e.adj[u], " ") ~= table.concat(a.adj[u], " ") then
        error(string.format('%s: reads both as an edge list and as an adjacency list, as different graphs; '
                            .. 'say which: format = "edges" or "adjacency"', path), 0)
      end
    end
  end
  if not (e or a) then
    error(string.format("%s: not a DecentralizePy graph file: as an edge list, line %d: %s; "
                        .. "as an adjacency list, line %d: %s", path, e_line, e_msg, a_line, a_msg), 0)
  end
  return e or a
end

--- graph.connected(g) -> true, or false and a node that node 0 does not reach (breadth-first from node 0)
function M.connected(g)
  local seen, queue, count = { [0] = true }, { 0 }, 1
  local head = 1
  while head <= #queue do
    local u = queue[head]
    head = head + 1
    for _, v in ipairs(g.adj[u]) do
      if not seen[v] then
        seen[v], count = true, count + 1
        queue[#queue + 1] = v
      end
    end
  end
  if count == g.n then return true end
  for u = 0, g.n - 1 do
    if not seen[u] then return false, u end
  end
end

--- graph.metropolis_hastings(g, u): see dpy.mixing (a run's nodes use that module without this one)
M.metropolis_hastings = mixing.metropolis_hastings

--- graph.spectral_gap(g) -> 1 - |lambda_2| of the Metropolis-Hastings mixing matrix W: how fast
-- plain averaging mixes. |lambda_2|: the largest modulus among W's eigenvalues but the top one (1),
-- from all of them (LAPACK's symmetric solver, t:eigvalsh(): exact, O(n^3); power iteration
-- stalled on long rings and tori, whose top eigenvalues lie close together: it gave a 100-node
-- ring 0.0044 for 0.0013). A graph that is not connected has 1 twice: gap 0.
function M.spectral_gap(g)
  local n = g.n
  if n == 1 then return 1 end
  local w <close> = tensor.zeros(n, n, { dtype = "float64" })
  for u = 0, n - 1 do
    local row <close> = w[u]
    for v, wv in pairs(M.metropolis_hastings(g, u)) do row[v] = wv end
  end
  local values <close> = w:eigvalsh()   -- ascending: the last is 1
  local lowest, second = values[0]:item(), values[n - 2]:item()
  return 1 - math.max(math.abs(lowest), math.abs(second))
end

-- A binary min-heap of integer keys, for frontier_order.
local function heap_push(h, k)
  local i = #h + 1
  h[i] = k
  while i > 1 and h[i // 2] > k do
    h[i], h[i // 2] = h[i // 2], k
    i = i // 2
  end
end

local function heap_pop(h)
  local top, last = h[1], h[#h]
  h[#h] = nil
  local n, i = #h, 1
  if n == 0 then return top end
  while true do
    local c = 2 * i
    if c > n then break end
    if c < n and h[c + 1] < h[c] then c = c + 1 end
    if h[c] >= last then break end
    h[i], i = h[c], c
  end
  h[i] = last
  return top
end

local FRONTIER_MAX_DEGREE = 64   -- denser graphs: every node neighbours so many that order hardly matters
local FRONTIER_MAX_NODES = 1048576   -- a key holds the uid in 20 bits, as the slots' priority does

--- graph.frontier_order(g) -> { [uid] = rank } over 0 .. n - 1, or nil for a graph with a node of
-- more than 64 neighbours (or of more than 2^20 nodes). The order in which a process's nodes take
-- its compute slots each round (l_nodes.c): a D-PSGD node keeps the model it sent until its last
-- neighbour has combined, so the nodes taken with a neighbour not yet taken ("open") each hold two
-- models. Greedily, the next node is the neighbour of a taken one that leaves the fewest open
-- (ties: the most neighbours taken, then the lowest uid; with none, the lowest uid not taken): on a
-- random 4-regular graph about a quarter of the nodes are open at the worst point instead of a half
-- in uid order. Deterministic, O(n d^2 log n).
function M.frontier_order(g)
  local n, adj = g.n, g.adj
  if n > FRONTIER_MAX_NODES then return nil end
  for u = 0, n - 1 do
    if #adj[u] > FRONTIER_MAX_DEGREE then return nil end
  end
  local taken, untaken_near, taken_near = {}, {}, {}
  for u = 0, n - 1 do untaken_near[u], taken_near[u] = #adj[u], 0 end
  local function key_of(v)   -- (open after v - closed by v, -taken_near[v], v) as one integer
    local delta = untaken_near[v] > 0 and 1 or 0
    for _, u in ipairs(adj[v]) do
      if taken[u] and untaken_near[u] == 1 then delta = delta - 1 end
    end
    return ((delta + 128) * 256 + (128 - taken_near[v])) * FRONTIER_MAX_NODES + v
  end
  local heap, rank, next_fresh = {}, {}, 0
  for r = 0, n - 1 do
    local v
    repeat   -- skip the taken and the stale (a key that changed was pushed again)
      local k = heap_pop(heap)
      if k then
        local u = k % FRONTIER_MAX_NODES
        if not taken[u] and key_of(u) == k then v = u end
      else   -- nothing open left: the lowest uid not taken starts afresh
        while taken[next_fresh] do next_fresh = next_fresh + 1 end
        v = next_fresh
      end
    until v
    taken[v], rank[v] = true, r
    for _, u in ipairs(adj[v]) do
      untaken_near[u], taken_near[u] = untaken_near[u] - 1, taken_near[u] + 1
    end
    for _, u in ipairs(adj[v]) do   -- the keys v changed: its neighbours', and the one node a
      if not taken[u] then          -- taken neighbour left with a single untaken one now closes
        heap_push(heap, key_of(u))
      elseif untaken_near[u] == 1 then
        for _, w in ipairs(adj[u]) do
          if not taken[w] then heap_push(heap, key_of(w)) end
        end
      end
    end
  end
  return rank
end

--- graph.one_way(g) -> u, v of the first link u lists whose other end v does not list u (nil: none,
-- the graph is undirected).
function M.one_way(g)
  local listed = {}
  for u = 0, g.n - 1 do
    listed[u] = {}
    for _, v in ipairs(g.adj[u]) do listed[u][v] = true end
  end
  for u = 0, g.n - 1 do
    for _, v in ipairs(g.adj[u]) do
      if not listed[v][u] then return u, v end
    end
  end
end

--- graph.incoming(g, u) -> the sorted uids whose lists name u: in a directed graph (a node's list:
-- the nodes it sends to), the nodes that send to u; in an undirected one, its neighbours.
function M.incoming(g, u)
  local from = {}
  for v = 0, g.n - 1 do
    for _, w in ipairs(g.adj[v]) do
      if w == u then from[#from + 1] = v end
    end
  end
  return from
end

--- graph.edges(g) -> count of undirected edges
function M.edges(g)
  local e = 0
  for u = 0, g.n - 1 do e = e + #g.adj[u] end
  return e // 2
end

return M
