-- State transforms and their chains.
local transforms = require "dpy.transforms"
local codec = require "dpy.codec.core"
local tensor = require "dpy.tensor"
local config = require "dpy.config"

describe("transforms", function()
  it("quantize within half a step, packing b < 8 bits tightly", function()
    tensor.manual_seed(1)
    local x = tensor.randn(10000)
    for _, bits in ipairs { 1, 2, 4, 8, 16 } do
      local q = codec.quantize(x, bits, 1000)
      assert.are.equal(24 + 10 * 8 + math.ceil(10000 * bits / 8), q:numel())
      local y = codec.dequantize(q)
      for c = 0, 9 do
        local xc, yc = x:narrow(0, c * 1000, 1000), y:narrow(0, c * 1000, 1000)
        local step = (xc:max():item() - xc:min():item()) / (2 ^ bits - 1)
        -- half a step, plus float32 rounding of values up to ~4
        assert.is_true((yc - xc):abs():max():item() <= step / 2 * (1 + 1e-5) + 2e-6, bits .. " bits")
      end
    end
  end)

  it("chain in config order and undo in reverse, recording the bytes of each step", function()
    tensor.manual_seed(2)
    local x = tensor.randn(50000)
    local chain = transforms.chain { { "uniform_asymmetric_quantization", bits = 8 }, { "zstd", level = 3 } }
    assert.are.equal("uniform_asymmetric_quantization(bits=8,chunk=0) | zstd(level=3)", chain.label)
    local sizes = {}
    local payload = chain:encode(x, sizes)
    assert.are.same({ 200000, 50032 }, sizes[1])
    assert.are.equal(50032, sizes[2][1])
    assert.are.equal(payload:numel(), sizes[2][2])
    local y = chain:decode(payload)
    assert.are.equal("float32", y:dtype())
    assert.is_true((y - x):abs():max():item() < (x:max():item() - x:min():item()) / 255)
    -- lossless fpzip, then zstd over its bytes
    local lossless = transforms.chain { "fpzip", "zstd" }
    assert.are.equal(0, (lossless:decode(lossless:encode(x)) - x):abs():max():item())
  end)

  it("give different chains different ids, and the empty chain id 0", function()
    local a = transforms.chain { { "uniform_asymmetric_quantization", bits = 8 } }
    local b = transforms.chain { { "uniform_asymmetric_quantization", bits = 4 } }
    assert.are_not.equal(a.id, b.id)
    assert.are.equal(0, transforms.chain({}).id)
  end)

  it("refuse a bits, level or precision past its range whole (2^32 + 4 bits was cut to 4)", function()
    local x = tensor.rand(10)
    assert.error_matches(function() codec.quantize(x, (1 << 32) + 4) end, "bits must be 1%.%.8 or 16")
    assert.error_matches(function() codec.zstd(x, (1 << 32) + 3) end, "the level must be %-131072%.%.22")
    assert.error_matches(function() codec.zstd(x, 23) end, "the level must be")
    assert.error_matches(function() codec.fpzip(x, (1 << 32) + 16) end, "precision must be 2%.%.32 bits")
    assert.error_matches(function() codec.fpzip(x, -(1 << 32)) end, "precision must be 2%.%.32 bits")
    assert.are.equal(10, codec.unzstd(codec.zstd(x, -5), "float32"):numel())
    assert.are.equal(10, codec.unfpzip(codec.fpzip(x, 16)):numel())
  end)

  it("refuse a malformed payload with a message", function()
    local chain = transforms.chain { { "uniform_asymmetric_quantization", bits = 8 } }
    local v, err = chain:decode(tensor.zeros(100, { dtype = "uint8" }))
    assert.is_nil(v)
    assert.matches("uniform_asymmetric_quantization: not a quantized payload", err)
  end)

  it("refuse a zstd bomb from its declared size, before allocating", function()
    -- a zstd frame header declaring 2^31 content bytes, then one RLE block: a few bytes that
    -- (with 16384 such blocks, 64 KB) would decode to 2 GiB
    local frame = "DPZ1" .. string.char(1, 0, 0, 0) .. string.pack("<I4 B I8", 0xFD2FB528, 0xE0, 1 << 31)
            .. string.char(0x03, 0, 0x10, 0)
    local b = tensor.from_bytes(frame, "uint8")
    local v, err = codec.unzstd(b, "uint8")
    assert.is_nil(v)
    assert.matches("2147483648 bytes decoded exceed the limit of 268435456", err)
    v, err = codec.unzstd(b, "uint8", 1000)
    assert.is_nil(v)
    assert.matches("exceed the limit of 1000", err)
  end)

  it("bound every step's output by the receiver's model size", function()
    tensor.manual_seed(3)
    local x = tensor.randn(1000)
    for _, list in ipairs { { { "uniform_asymmetric_quantization", bits = 4, chunk = 1 }, "zstd" },
                            { "fpzip", "zstd" }, { "zstd" }, { "fpzip" } } do
      local chain = transforms.chain(list)
      local payload = chain:encode(x)
      assert.are.equal(1000, chain:decode(payload, 1000):numel(), chain.label)
      local v, err = chain:decode(payload, 999)
      assert.is_nil(v, chain.label)
      assert.matches("exceed the limit", err)
    end
  end)

  it("refuse a decoded vector of another size than the receiver's model, with or without steps", function()
    local x = tensor.randn(1000)
    for _, list in ipairs { {}, { "zstd" }, { { "uniform_asymmetric_quantization", bits = 8, chunk = 100 } } } do
      local chain = transforms.chain(list)
      local payload = chain:encode(x)
      local v, err = chain:decode(payload, 1001)
      assert.is_nil(v, chain.label)
      assert.matches("1000 values, but the model has 1001", err)
      if payload ~= x then payload:free() end
    end
  end)

  it("report bad options and impossible orders with the config's file and line", function()
    local dir = tmpdir()
    local function fails_with(want)
      local ok, err = pcall(config.load, dir .. "/c.lua")
      assert.is_false(ok)
      assert.are.equal(want, err)
    end
    write_file(dir .. "/c.lua", "nodes = 2\ntransforms = { { 'uniform_asymmetric_quantization', bits = 12 } }\n")
    fails_with(dir .. "/c.lua:2: transforms[1]: transform 'uniform_asymmetric_quantization': option 'bits' "
                     .. "must be 1..8 or 16, got 12")
    write_file(dir .. "/c.lua", "transforms = { 'zstd', 'fpzip' }\n")
    fails_with(dir .. "/c.lua:1: transforms[2]: fpzip encodes float32 values, but transforms[1] (zstd) "
                     .. "outputs bytes; put it first")
    write_file(dir .. "/c.lua", "transforms = { 'zstdd' }\n")
    fails_with(dir .. "/c.lua:1: transforms[1]: no transform named 'zstdd' (did you mean 'zstd'?); "
                     .. "valid: fpzip, uniform_asymmetric_quantization, zstd, or the path of a Lua file")
    write_file(dir .. "/c.lua", "sharing = { 'trimmed_mean' }\n")
    fails_with(dir .. "/c.lua:1: sharing: sharing 'trimmed_mean': give f or beta (one of them)")
  end)
end)
