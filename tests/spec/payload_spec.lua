-- The payload limit of a run is its model's size encoded by its transform chain at worst (issue:
-- it was 1 GiB whatever the model, and a peer promising 1 GiB grew a process by 540 MB).
local config = require "dpy.config"
local payload = require "dpy.payload"
local BIN = shell_quote(DPY_BIN)

-- the cnn's parameters, counted from its layers' shapes (README: conv 1->16 5x5, conv 16->32 5x5,
-- linear 1568->128, linear 128->10), not from the model
local CNN = (16 * 1 * 5 * 5 + 16) + (32 * 16 * 5 * 5 + 32) + (32 * 7 * 7 * 128 + 128) + (128 * 10 + 10)

-- ZSTD_compressBound (zstd.h: srcSize + srcSize/256 + (128 KiB - srcSize)/2048 under 128 KiB),
-- plus the 8-byte header of our zstd payloads (magic, element size)
local function zstd_bound(n) return n + (n >> 8) + (n < 131072 and (131072 - n) >> 11 or 0) + 8 end

local function limit_of(text)
  local dir = tmpdir()
  write_file(dir .. "/c.lua", TINY_RUN .. text)
  return payload.limit(config.load(dir .. "/c.lua"))
end

describe("the payload limit", function()
  it("is the model's float32 bytes without transforms", function()
    assert.are.equal(215370, CNN)
    local limit, values = limit_of("model = 'cnn'\n")
    assert.are.equal(CNN, values)
    assert.are.equal(CNN * 4, limit)
  end)

  it("is the chain's worst case with transforms", function()
    assert.are.equal(zstd_bound(CNN * 4), limit_of("model = 'cnn'\ntransforms = { 'zstd' }\n"))
  end)

  it("is what secure aggregation declares: 8-byte fixed point, and a sample count", function()
    assert.are.equal((CNN + 1) * 8, limit_of("model = 'cnn'\nalgorithm = 'secure_fedavg'\n"))
    assert.are.equal((CNN + 1) * 8, limit_of("model = 'cnn'\nsharing = 'secure_average'\n"))
  end)

  it("never falls under the control messages' 64 KiB", function()
    local limit, values = limit_of("model = { 'mlp', hidden = { 4 } }\n")
    assert.is_true(values * 4 < 65536)
    assert.are.equal(65536, limit)
  end)

  it("refuses, at the sender, a message larger than the run's model #e2e", function()
    local dir = tmpdir()
    -- sent past the sharing (an outgoing modifier of another size is refused before, by its node)
    write_file(dir .. "/grow.lua", [[
      local registry = require "dpy.registry"
      local tensor = require "dpy.tensor"
      return registry.register { kind = "action", name = "grow",
        new = function() return { post_train = function(node, r)
          local flat = node.model:get_flat()
          require("dpy.exchange").send(node, node.graph.adj[node.uid][1], r, tensor.cat { flat, tensor.zeros(1) })
        end } end }
    ]])
    write_file(dir .. "/c.lua", TINY_RUN .. "model = 'cnn'\nactions = { 'grow.lua' }\n")
    for _, processes in ipairs { 1, 2 } do
      local code, out, err = sh(BIN .. " run " .. dir .. "/c.lua processes=" .. processes .. " --out " .. dir
                                .. "/p" .. processes)
      assert.are_not.equal(0, code)
      assert.truthy((out .. err):find(string.format("payload of %d bytes exceeds the limit of %d", CNN * 4 + 4,
                                                    CNN * 4), 1, true), out .. err)
    end
  end)
end)
