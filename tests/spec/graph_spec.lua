-- dpy.graph: structure of every generator, file formats, Metropolis-Hastings weights, spectral gap.
local graph = require "dpy.graph"

local function degrees(g)
  local d = {}
  for u = 0, g.n - 1 do d[#d + 1] = #g.adj[u] end
  return d
end

local function all_equal(list, v)
  for _, x in ipairs(list) do if x ~= v then return false end end
  return true
end

local function symmetric(g)
  for u = 0, g.n - 1 do
    for _, v in ipairs(g.adj[u]) do
      local found = false
      for _, w in ipairs(g.adj[v]) do found = found or w == u end
      if not found then return false end
    end
  end
  return true
end

describe("graphs", function()
  it("ring, torus, full and star have their degrees", function()
    assert.is_true(all_equal(degrees(graph.ring(8)), 2))
    assert.are.equal(8, graph.edges(graph.ring(8)))
    assert.is_true(all_equal(degrees(graph.torus(4, 4)), 4))
    assert.are.same({ 2, 3, 2, 3, 4, 3, 2, 3, 2 }, degrees(graph.torus(3, 3, false)))
    assert.is_true(all_equal(degrees(graph.full(5)), 4))
    local s = graph.star(5)
    assert.are.same({ 4, 1, 1, 1, 1 }, degrees(s))
  end)

  it("random regular graphs are d-regular, simple, connected and seeded", function()
    local g = graph.regular(16, 4, 7)
    assert.is_true(all_equal(degrees(g), 4))
    assert.is_true(symmetric(g))
    assert.is_true(graph.connected(g))
    for u = 0, 15 do
      local seen = {}
      for _, v in ipairs(g.adj[u]) do
        assert.are_not.equal(u, v)
        assert.is_nil(seen[v])
        seen[v] = true
      end
    end
    assert.are.same(g.adj, graph.regular(16, 4, 7).adj)
    assert.are_not.same(g.adj, graph.regular(16, 4, 8).adj)
    assert.is_true(all_equal(degrees(graph.regular(1024, 4, 1)), 4))
    assert.error_matches(function() graph.regular(5, 3, 1) end, "nodes %* degree even")
  end)

  it("erdos_renyi and small_world are connected and seeded", function()
    local e = graph.erdos_renyi(30, 0.2, 3)
    assert.is_true(graph.connected(e))
    assert.are.same(e.adj, graph.erdos_renyi(30, 0.2, 3).adj)
    local w = graph.small_world(20, 4, 0.2, 5)
    assert.is_true(graph.connected(w))
    assert.are.equal(40, graph.edges(w))
  end)

  it("small_world keeps the lattice edge of a node linked to every other: no endless redraw", function()
    -- 6 nodes, k = 4, beta = 0.5, seed 21: node 5's rewiring found every other node already linked
    -- and redrew forever (the launcher hung before any node started); Watts-Strogatz as networkx
    -- skips that rewiring. In a process of its own, with a time limit: a hang fails, never blocks.
    local dir = tmpdir()
    write_file(dir .. "/sw.lua", [[
      local graph = require "dpy.graph"
      for seed = 1, 60 do
        for _, c in ipairs { { 6, 4, 0.5 }, { 7, 6, 0.1 }, { 5, 4, 1 } } do
          local g = graph.small_world(c[1], c[2], c[3], seed)
          assert(graph.connected(g))
        end
      end
      print("ok")
    ]])
    local code, out, err = sh("timeout 30 " .. shell_quote(DPY_BIN) .. " " .. dir .. "/sw.lua")
    assert.are.equal(0, code, err)
    assert.matches("ok", out)
  end)

  describe("files in DecentralizePy's layout", function()
    -- tests/fixtures/graphs: written by make_graphs.py with DecentralizePy's write_graph_to_file;
    -- expected.lua holds what its read_graph_from_file gets from each
    local dir = REPO .. "/tests/fixtures/graphs/"
    local expected = dofile(dir .. "expected.lua")
    local registry = require "dpy.registry"

    local function bad(text, format, pattern)
      local path = tmpdir() .. "/g.txt"
      write_file(path, text)
      local ok, err = pcall(graph.from_file, path, format)
      assert.is_false(ok, text)
      assert.matches(pattern, err)
    end

    it("read every file as its reader does, given the format", function()
      local names = {}
      for name in pairs(expected) do if name ~= "permutation" then names[#names + 1] = name end end
      table.sort(names)
      assert.are.equal(8, #names)
      for _, name in ipairs(names) do
        local want = expected[name]
        local g = graph.from_file(dir .. name, want.format)
        assert.are.equal(want.n, g.n, name)
        assert.are.same(want.adj, g.adj, name)
      end
      assert.are.same(graph.ring(16).adj, graph.from_file(dir .. "ring16.adj", "adjacency").adj)
      assert.are.same(graph.ring(16).adj, graph.from_file(dir .. "ring16.edges", "edges").adj)
      local p, ring = expected.permutation, graph.from_file(dir .. "permuted_ring16.adj", "adjacency")
      for i = 1, 16 do
        local u, v = p[i], p[i % 16 + 1]
        assert.is_truthy(ring.adj[u][1] == v or ring.adj[u][2] == v)
      end
    end)

    it("tell the format from the content only when one reading is possible", function()
      for _, name in ipairs { "ring16.edges", "regular16.edges", "regular16.adj", "permuted_ring16.edges",
                              "dpy_eval_graph.adj", "dpy_eval_4_node_fullyConnected.edges" } do
        assert.are.same(expected[name].adj, graph.from_file(dir .. name).adj, name)
      end
      -- two neighbours per line: also a one-direction edge list (of two 8-cycles for the ring)
      for _, name in ipairs { "ring16.adj", "permuted_ring16.adj" } do
        assert.error_matches(function() graph.from_file(dir .. name) end,
          name:gsub("%p", "%%%0") .. ": reads both as an edge list and as an adjacency list, as different "
          .. "graphs; say which: format = \"edges\" or \"adjacency\"")
      end
      -- a triangle reads the same both ways
      local path = tmpdir() .. "/triangle"
      write_file(path, "3\n1 2\n0 2\n0 1\n")
      assert.are.same(graph.full(3).adj, graph.from_file(path).adj)
    end)

    it("name the file, the line and the problem in bad input", function()
      bad("", "edges", "g.txt:1: expected the node count on the first line, got ''")
      bad("x\n0 1\n", "edges", "g.txt:1: expected the node count on the first line, got 'x'")
      bad("0\n", "edges", "g.txt:1: a graph needs at least 1 node, the file says 0")
      bad("4\n0 1\n1 x\n", "edges", "g.txt:3: 'x' is not a node id")
      bad("4\n0 1\n1 2 3\n", "edges", "g.txt:3: expected 'u v', got '1 2 3'")
      bad("4\n0 1\n\n1 2\n", "edges", "g.txt:3: expected 'u v', got an empty line")
      bad("4\n0 1\n1 4\n", "edges", "g.txt:3: node 4 out of range 0..3")
      bad("4\n0 1\n-1 2\n", "edges", "g.txt:3: node %-1 out of range 0..3")
      bad("4\n0 1\n2 2\n", "edges", "g.txt:3: a self%-loop at node 2")
      bad("3\n1 2\n0 2\n", "adjacency", "g.txt:3: the file ends after 2 of 3 nodes' lines")
      bad("2\n1\n0\n1\n", "adjacency", "g.txt:4: a line past the last node's %(2 nodes%)")
      bad("3\n1 2\n0 2.5\n0 1\n", "adjacency", "g.txt:3: '2.5' is not a node id")
      bad("3\n1 2\n0 1\n0 1\n", "adjacency", "g.txt:3: a self%-loop at node 1")
      bad("3\n1 2\n0\n0 1\n", "adjacency", "g.txt:4: node 2 lists 1, but node 1 %(line 3%) does not list 2")
      bad("3\n1 2\n0 7\n0 1\n", "adjacency", "g.txt:3: node 7 out of range 0..2")
      bad("3\n1 2\n0 2\n0 1\n", "adj", "graph.from_file: format must be \"edges\" or \"adjacency\", got \"adj\"")
      -- neither reading works: both reasons
      bad("3\n1 2 x\n0 2\n0 1\n", nil, "g.txt: not a DecentralizePy graph file: as an edge list, line 2: "
          .. "expected 'u v', got '1 2 x'; as an adjacency list, line 2: 'x' is not a node id")
      -- one huge number once built tables until memory ran out: the count is bounded first
      bad("999999999999\n", nil,
          "g.txt:1: the file says 999999999999 nodes, more than the limit of 1000000 %(max_nodes%)")
      bad("999999999999\n0 1\n", "edges", "g.txt:1: the file says 999999999999 nodes, more than")
      local path = tmpdir() .. "/g.txt"
      write_file(path, "40\n0 1\n")
      local ok, err = pcall(graph.from_file, path, "edges", 16)
      assert.is_false(ok)
      assert.matches("g.txt:1: the file says 40 nodes, more than the limit of 16 %(max_nodes%)", err)
      assert.are.equal(40, graph.from_file(path, "edges", 40).n)
      assert.error_matches(function() graph.from_file("/nonexistent/g.edges") end,
                           "graph file: /nonexistent/g.edges: No such file")
    end)

    it("are the file graph of a config, its format an option", function()
      local g = registry.build("graph", { "file", path = dir .. "ring16.adj", format = "adjacency" }, { nodes = 16 })
      assert.are.same(graph.ring(16).adj, g.adj)
      assert.are.equal("path", registry.spec("graph", { "file", path = dir .. "ring16.adj" }).options.path.type)
      local _, err = registry.check("graph", { "file", path = dir .. "ring16.adj", format = "adj" })
      assert.matches("graph 'file': option 'format' must be one of \"edges\", \"adjacency\", got \"adj\"", err)
      assert.error_matches(function()
        registry.build("graph", { "file", path = dir .. "ring16.adj" }, { nodes = 16 })
      end, "say which: format")
      assert.error_matches(function()
        registry.build("graph", { "file", path = dir .. "ring16.edges" }, { nodes = 8 })
      end, "the file says 16 nodes, more than the limit of 8 %(the config's nodes%)")
    end)
  end)

  it("gives doubly stochastic Metropolis-Hastings weights", function()
    local g = graph.star(4)
    local w0, w1 = graph.metropolis_hastings(g, 0), graph.metropolis_hastings(g, 1)
    assert.are.equal(0.25, w0[1])              -- 1 / (1 + max(3, 1))
    assert.are.equal(0.25, w1[0])
    assert.are.equal(0.25, w0[0])              -- 1 - 3 * 0.25
    assert.are.equal(0.75, w1[1])
    for u = 0, 3 do
      local sum = 0
      for _, x in pairs(graph.metropolis_hastings(g, u)) do sum = sum + x end
      assert.is_true(math.abs(sum - 1) < 1e-12)
    end
  end)

  describe("frontier_order", function()
    -- the most nodes taken, in order, with a neighbour not yet taken: the definition, counted
    -- directly (each such node holds two models, l_nodes.c)
    local function worst_open(g, rank)
      local by_rank = {}
      for u = 0, g.n - 1 do by_rank[rank[u] + 1] = u end
      local worst = 0
      for k = 1, g.n do
        local open = 0
        for j = 1, k do
          for _, v in ipairs(g.adj[by_rank[j]]) do
            if rank[v] >= k then open = open + 1 break end
          end
        end
        worst = math.max(worst, open)
      end
      return worst
    end
    local function is_permutation(g, rank)
      local seen = {}
      for u = 0, g.n - 1 do
        local r = rank[u]
        if math.type(r) ~= "integer" or r < 0 or r >= g.n or seen[r] then return false end
        seen[r] = true
      end
      return true
    end
    local function uid_order(g)
      local rank = {}
      for u = 0, g.n - 1 do rank[u] = u end
      return rank
    end

    it("orders every node once, graphs in pieces too, and leaves dense graphs to uid order", function()
      local two = { n = 8, adj = {} }   -- two rings of 4, 0-3 and 4-7
      for u = 0, 7 do
        local base = u < 4 and 0 or 4
        two.adj[u] = { base + (u - base + 3) % 4, base + (u - base + 1) % 4 }
      end
      for _, g in ipairs { graph.ring(9), graph.star(7), graph.erdos_renyi(40, 0.1, 2), two,
                           graph.regular(256, 4, 3) } do
        assert.is_true(is_permutation(g, graph.frontier_order(g)))
      end
      assert.are.same(graph.frontier_order(graph.regular(64, 4, 1)), graph.frontier_order(graph.regular(64, 4, 1)))
      assert.is_nil(graph.frontier_order(graph.full(80)))
    end)

    it("keeps far fewer nodes open than uid order on a random regular graph", function()
      local g = graph.regular(512, 4, 1)
      local by_uid, ours = worst_open(g, uid_order(g)), worst_open(g, graph.frontier_order(g))
      assert.is_true(by_uid > 0.45 * g.n, "uid order: " .. by_uid)
      assert.is_true(ours < 0.3 * g.n, "frontier order: " .. ours)
      assert.is_true(worst_open(graph.ring(50), graph.frontier_order(graph.ring(50))) <= 3)
    end)
  end)

  it("reports the spectral gap of the mixing matrix", function()
    assert.is_true(math.abs(graph.spectral_gap(graph.full(6)) - 1) < 1e-6)
    assert.is_true(math.abs(graph.spectral_gap(graph.ring(4)) - 2 / 3) < 1e-6)
    assert.is_true(graph.spectral_gap(graph.ring(32)) < graph.spectral_gap(graph.regular(32, 4, 1)))
    -- a ring's mixing matrix (1/3 each) has eigenvalues 1/3 + 2/3 cos(2 pi k / n): the gap is
    -- 2/3 (1 - cos(2 pi / n)), tiny for a long ring (power iteration stopped far above it)
    for _, n in ipairs { 100, 400 } do
      local want = 2 / 3 * (1 - math.cos(2 * math.pi / n))
      local got = graph.spectral_gap(graph.ring(n))
      assert.is_true(math.abs(got - want) < 1e-5, string.format("ring %d: %.6f, not %.6f", n, got, want))
    end
  end)
end)
