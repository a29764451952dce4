-- dpy.serialize: plain Lua values as Lua source that reads back equal, bit for bit.
local serialize = require "dpy.serialize"

local function read_back(text)
  return assert(load("return " .. text, "=text", "t", {}))()
end

local function hex(x)
  return (string.pack("<d", x):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

describe("dpy.serialize", function()
  it("writes floats as the shortest decimal that reads back to the same bits", function()
    -- text: Python 3.11's repr (the shortest round-trip decimal); bits: struct.pack('<d', x).hex()
    local cases = {
      { 0.1, "0.1", "9a9999999999b93f" },
      { 0.1 + 0.2, "0.30000000000000004", "343333333333d33f" },
      { 1 / 3, "0.3333333333333333", "555555555555d53f" },
      { 5e-324, "5e-324", "0100000000000000" },
      { 1.7976931348623157e+308, "1.7976931348623157e+308", "ffffffffffffef7f" },
      { 100.0, "100.0", "0000000000005940" },
      { -0.0, "-0.0", "0000000000000080" },
      { 1e16, "1e+16", "0080e03779c34143" },
      { 2.5e-5, "2.5e-05", "2d431cebe236fa3e" },
      { 123456789012345678.0, "1.2345678901234568e+17", "350f63bab4697b43" },
    }
    for _, c in ipairs(cases) do
      local text = serialize.value(c[1])
      assert.are.equal(c[2], text)
      local back = read_back(text)
      assert.are.equal("float", math.type(back), text)
      assert.are.equal(c[3], hex(back), text)
    end
    assert.are.equal("1/0", serialize.value(math.huge))
    assert.are.equal("-1/0", serialize.value(-math.huge))
    local nan = read_back(serialize.value(0 / 0))
    assert.is_true(nan ~= nan)
  end)

  it("keeps integers integers, down to math.mininteger", function()
    for _, i in ipairs { 0, 1, -7, math.maxinteger, math.mininteger } do
      local back = read_back(serialize.value(i))
      assert.are.equal("integer", math.type(back))
      assert.are.equal(i, back)
    end
    assert.are.equal("3", serialize.value(3))
  end)

  it("quotes any string on one line", function()
    local s = "a \"b\" \\ c\nd\re\0f\1\255'"
    local text = serialize.value(s)
    assert.is_nil(text:find("\n"))
    assert.are.equal(s, read_back(text))
  end)

  it("writes tables in a stable key order, nested, and reads them back equal", function()
    local v = { "sgd", 2, lr = 0.05, momentum = 0.9, [0] = true, [-1.5] = "x", ["end"] = 1, ["a b"] = {},
                nested = { nodes = { 0, 3 }, sigma = 0.01 }, [true] = 1, [false] = 0 }
    local text = serialize.value(v)
    assert.are.equal('{ "sgd", 2, [-1.5] = "x", [0] = true, ["a b"] = {}, ["end"] = 1, lr = 0.05, '
                     .. 'momentum = 0.9, nested = { nodes = { 0, 3 }, sigma = 0.01 }, [false] = 0, [true] = 1 }',
                     text)
    assert.are.same(v, read_back(text))
    local copy = {}
    for k, x in pairs(v) do copy[k] = x end
    assert.are.equal(text, serialize.value(copy), "the same value, the same text")
  end)

  it("writes assignments sorted by key", function()
    assert.are.equal('a = 1\nb = { 1.5 }\nname = "x"\n', serialize.assignments { name = "x", b = { 1.5 }, a = 1 })
  end)

  it("names where a value that is not plain sits", function()
    local function f() end
    assert.has_error(function() serialize.assignments({ faults = { drop = f } }, "config") end,
                     "config.faults.drop: a function cannot be written as a Lua value")
    assert.has_error(function() serialize.value({ 1, { io.stdout } }, "x") end,
                     "x[2][1]: a userdata cannot be written as a Lua value")
    local t = {}
    t.self = t
    assert.has_error(function() serialize.value(t, "t") end, "t.self: a table that contains itself cannot be written")
    assert.has_error(function() serialize.value({ [f] = 1 }, "t") end, "t: a function key cannot be written")
    assert.has_error(function() serialize.value(setmetatable({}, {}), "t") end,
                     "t: a table with a metatable cannot be written as a Lua value")
    assert.has_error(function() serialize.assignments({ [1] = 2 }, "config") end, "config: key 1 is not a name")
  end)
end)
