-- Inputs parsed in Lua, under random mutation: graph files (graph.from_file) and metrics JSON
-- (metrics.read). Every mutant is either read into a well-formed value or refused with a message
-- naming the file; never a Lua error from inside the reader, never a hang (each test stops after
-- a fixed number of mutants or seconds, whichever comes first). The decoders in C are fuzzed by
-- scripts/fuzz (libFuzzer).
local graph = require "dpy.graph"
local metrics = require "dpy.metrics"

local MUTANTS, SECONDS = 1000, 5

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local PIECES = { "0", "1", " ", "\n", "-", "9999999999", "1e3", "2.5", "x", "\t", "\r\n", "[", "]", "{", "}", ",",
                 ":", '"', "null", "1" .. string.rep("0", 30), "\0", "\255" }

-- One random edit of s: a byte changed, a piece inserted, a span deleted or doubled.
local function mutate(s)
  local n = #s
  local at = math.random(0, n)
  local kind = math.random(4)
  if kind == 1 and n > 0 then
    local i = math.random(n)
    return s:sub(1, i - 1) .. string.char(math.random(0, 255)) .. s:sub(i + 1)
  elseif kind == 2 then
    return s:sub(1, at) .. PIECES[math.random(#PIECES)] .. s:sub(at + 1)
  elseif kind == 3 and n > 0 then
    local len = math.random(1, math.max(1, n // 4))
    return s:sub(1, at) .. s:sub(at + len + 1)
  else
    local len = math.random(1, math.max(1, math.min(64, n)))
    return s:sub(1, at + len) .. s:sub(at + 1, at + len) .. s:sub(at + len + 1)
  end
end

-- Runs check on mutants of the seeds (each mutant mutated 1..4 times) until the count or the
-- time runs out; returns how many were accepted and refused.
local function campaign(seeds, path, check)
  math.randomseed(17)
  local t0, counts = os.clock(), { accepted = 0, refused = 0 }
  for i = 1, MUTANTS do
    local s = seeds[(i - 1) % #seeds + 1]
    for _ = 1, math.random(4) do s = mutate(s) end
    local f = assert(io.open(path, "wb"))
    f:write(s)
    f:close()
    local verdict = check(s)
    counts[verdict] = counts[verdict] + 1
    if os.clock() - t0 > SECONDS then break end
  end
  return counts
end

describe("inputs parsed in Lua, mutated at random", function()
  it("graph files: a well-formed graph or a message naming the file", function()
    local dir = REPO .. "/tests/fixtures/graphs/"
    local seeds = {}
    for _, name in ipairs { "ring16.edges", "ring16.adj", "regular16.adj", "dpy_eval_4_node_fullyConnected.edges" } do
      seeds[#seeds + 1] = read(dir .. name)
    end
    local path = tmpdir() .. "/mutant.txt"
    local counts = campaign(seeds, path, function(text)
      local ok, g = pcall(graph.from_file, path, nil, 1000)
      if not ok then
        assert(type(g) == "string" and g:find(path, 1, true) == 1,
               string.format("not a message naming the file: %s\n--- input:\n%s", tostring(g), text))
        return "refused"
      end
      assert(math.type(g.n) == "integer" and g.n >= 1 and g.n <= 1000, "node count")
      for u = 0, g.n - 1 do
        for _, v in ipairs(g.adj[u]) do
          assert(math.type(v) == "integer" and v >= 0 and v < g.n and v ~= u, "neighbour " .. tostring(v))
        end
      end
      return "accepted"
    end)
    assert.is_true(counts.refused > 0 and counts.accepted > 0)
  end)

  it("metrics JSON: a table or nil and a message naming the file", function()
    local series = { loss = { { round = 1, value = 2.5 }, { round = 2, value = 0 / 0 } }, accuracy = { 0.1, 0.5 } }
    local seeds = { metrics.json.encode({ uid = 3, metrics = { loss = { 1.5, 2 } } }),
                    metrics.json.encode({ uid = 0, metrics = series, nested = { { { {} } } } }) }
    local path = tmpdir() .. "/mutant.json"
    local counts = campaign(seeds, path, function(text)
      local ok, t, err = pcall(metrics.read, path)
      assert(ok, string.format("metrics.read raised: %s\n--- input:\n%s", tostring(t), text))
      if t == nil then
        assert(type(err) == "string" and err:find(path, 1, true) == 1, "message: " .. tostring(err))
        return "refused"
      end
      return "accepted"
    end)
    assert.is_true(counts.refused > 0 and counts.accepted > 0)
    -- nesting past cjson's limit is a message too, not a stack overflow
    local f = assert(io.open(path, "wb"))
    f:write(string.rep("[", 100000))
    f:close()
    local t, err = metrics.read(path)
    assert.is_nil(t)
    assert.matches("mutant.json: .*nest", err)
  end)
end)
