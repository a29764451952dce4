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

  it("reads DecentralizePy's edge-list and adjacency formats", function()
    local dir = tmpdir()
    write_file(dir .. "/edges.txt", "4\n0 1\n1 2\n2 3\n3 0\n")
    write_file(dir .. "/adj.txt", "1 3\n0 2\n1 3\n2 0\n")
    assert.are.same(graph.ring(4).adj, graph.from_file(dir .. "/edges.txt").adj)
    assert.are.same(graph.ring(4).adj, graph.from_file(dir .. "/adj.txt").adj)
    write_file(dir .. "/bad.txt", "4\n0 1\n1 x\n")
    assert.error_matches(function() graph.from_file(dir .. "/bad.txt") end, "bad.txt:3: expected 'u v'")
    assert.is_false(graph.connected(graph.from_file((function()
      write_file(dir .. "/split.txt", "4\n0 1\n2 3\n")
      return dir .. "/split.txt"
    end)())))
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

  it("reports the spectral gap of the mixing matrix", function()
    assert.is_true(math.abs(graph.spectral_gap(graph.full(6)) - 1) < 1e-6)
    assert.is_true(math.abs(graph.spectral_gap(graph.ring(4)) - 2 / 3) < 1e-6)
    assert.is_true(graph.spectral_gap(graph.ring(32)) < graph.spectral_gap(graph.regular(32, 4, 1)))
  end)
end)
