-- dpy.partition: sizes, coverage, label mixes and determinism.
local tensor = require "dpy.tensor"
local partition = require "dpy.partition"

-- 1000 samples, 10 classes of 100
local labels = {}
for i = 1, 1000 do labels[i] = (i - 1) % 10 end

local function check_cover(parts, n)
  local seen, total = {}, 0
  for _, p in ipairs(parts) do
    for _, i in ipairs(p:totable()) do
      assert.is_nil(seen[i], "sample " .. i .. " given twice")
      seen[i] = true
      total = total + 1
    end
  end
  assert.are.equal(n, total)
end

local function classes_of(part)
  local set, count = {}, 0
  for _, i in ipairs(part:totable()) do
    local c = labels[i + 1]
    if not set[c] then set[c], count = true, count + 1 end
  end
  return count
end

describe("partitioners", function()
  it("iid: equal sizes (remainder to the first), disjoint, covering", function()
    local parts = partition.iid(labels, 3, { seed = 1 })
    assert.are.same({ 334, 333, 333 }, { parts[1]:numel(), parts[2]:numel(), parts[3]:numel() })
    check_cover(parts, 1000)
    assert.are.equal(10, classes_of(parts[1]))
    assert.are.equal("int64", parts[1]:dtype())
  end)

  it("is deterministic in its seed", function()
    assert.are.same(partition.iid(labels, 4, { seed = 9 })[2]:totable(),
                    partition.iid(labels, 4, { seed = 9 })[2]:totable())
    assert.are_not.same(partition.iid(labels, 4, { seed = 9 })[2]:totable(),
                        partition.iid(labels, 4, { seed = 10 })[2]:totable())
    assert.are.same(partition.dirichlet(labels, 5, { alpha = 0.5, seed = 2 })[3]:totable(),
                    partition.dirichlet(tensor.new(labels), 5, { alpha = 0.5, seed = 2 })[3]:totable())
  end)

  it("dirichlet: a tiny alpha gives a class to a node drawn at random, never to the last by default", function()
    -- Gamma(0.001) draws underflow to 0 about half the time: all of a class's zero made 0/0 proportions,
    -- and the class went whole to the last node (2 nodes: 61 % of the classes instead of half)
    local rng = require("dpy.random").new(5)
    for _ = 1, 200 do
      local p = rng:dirichlet(0.001, 2)
      assert.is_true(p[1] == p[1] and p[2] == p[2] and math.abs(p[1] + p[2] - 1) < 1e-12,
                     "proportions " .. p[1] .. ", " .. p[2])
    end
    local one_each = {}
    for i = 1, 2000 do one_each[i] = i - 1 end   -- 2,000 classes of one sample: each goes to one node
    local parts = partition.dirichlet(one_each, 2, { alpha = 0.001, seed = 1 })
    check_cover(parts, 2000)
    assert.is_true(math.abs(parts[2]:numel() - 1000) < 100, "the last node got " .. parts[2]:numel() .. " of 2000")
  end)

  it("dirichlet: small alpha skews the label mix, large alpha evens it, no node is empty", function()
    local skewed = partition.dirichlet(labels, 10, { alpha = 0.05, seed = 3 })
    local even = partition.dirichlet(labels, 10, { alpha = 1000, seed = 3 })
    check_cover(skewed, 1000)
    check_cover(even, 1000)
    local skew_classes, even_classes = 0, 0
    for k = 1, 10 do
      assert.is_true(skewed[k]:numel() >= 1)
      skew_classes = skew_classes + classes_of(skewed[k])
      even_classes = even_classes + classes_of(even[k])
    end
    assert.is_true(skew_classes < 40, "alpha 0.05 gave " .. skew_classes .. " node-classes")
    assert.are.equal(100, even_classes)
    assert.error_matches(function() partition.dirichlet(labels, 10, { alpha = 0 }) end,
                         "partition.dirichlet: option 'alpha' must be a number > 0, got 0")
  end)

  it("shards: each node holds shards_per_node label-sorted shards", function()
    local parts = partition.shards(labels, 10, { shards_per_node = 2, seed = 4 })
    check_cover(parts, 1000)
    for k = 1, 10 do
      assert.are.equal(100, parts[k]:numel())
      assert.is_true(classes_of(parts[k]) <= 2)
    end
  end)

  it("refuses more nodes than samples", function()
    assert.error_matches(function() partition.iid({ 0, 1 }, 3) end, "2 samples cannot give each of 3 nodes one")
    assert.error_matches(function() partition.iid(labels, 2, { sed = 1 }) end, "did you mean 'seed'")
  end)

  it("shards: refuses more shards than samples, counting shards, not nodes", function()
    assert.error_matches(function() partition.shards(labels, 4, { shards_per_node = 1000 }) end,
                         "partition.shards: 1000 samples cannot give each of 4000 shards one "
                         .. "%(4 nodes x 1000 shards_per_node%)")
  end)
end)
