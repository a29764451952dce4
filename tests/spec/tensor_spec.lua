-- dpy.tensor: values checked against hand-computed results, and the error paths.
local tensor = require "dpy.tensor"

local function T(t) return tensor.new(t) end
local function same(expected, t) assert.are.same(expected, t:totable()) end

describe("tensor creation", function()
  it("builds constants, ranges and identity", function()
    same({ { 0, 0, 0 }, { 0, 0, 0 } }, tensor.zeros(2, 3))
    same({ 1, 1 }, tensor.ones({ 2 }))
    same({ { 7, 7 } }, tensor.full({ 1, 2 }, 7))
    -- the shape given as numbers: the last number is the value, an integer or not
    same({ { 7, 7 }, { 7, 7 } }, tensor.full(2, 2, 7))
    same({ -1, -1 }, tensor.full(2, -1))
    same({ { 2.5, 2.5 } }, tensor.full(1, 2, 2.5))
    local ints = tensor.full(2, 3, 7, "int64")
    assert.are.same({ "int64", { 2, 3 } }, { ints:dtype(), ints:size() })
    assert.has_error(function() tensor.full(2.5, 3, 7) end,
                     "bad argument #1 to 'full' (sizes must be integers, got 2.5)")
    -- a float with an integer value is a size (2.0, as from 4 / 2); any other says so
    for _, name in ipairs { "zeros", "ones", "empty", "rand", "randn" } do
      assert.are.same({ 2, 3 }, tensor[name](2.0, 3):size(), name)
      assert.are.same({ 2 }, tensor[name]({ 2.0 }):size(), name)
      assert.error_matches(function() tensor[name](2.5) end,
                           "^bad argument #1 to '.-' %(sizes must be integers, got 2%.5%)$")
      assert.error_matches(function() tensor[name](-1) end, "^bad argument #1 to '.-' %(sizes must be >= 0%)$")
    end
    same({ { 7, 7 } }, tensor.full(1.0, 2.0, 7))
    assert.has_error(function() tensor.full(2, 0.5, 7) end,
                     "bad argument #2 to 'full' (sizes must be integers, got 0.5)")
    same({ { 1, 0 }, { 0, 1 } }, tensor.eye(2))
    same({ 0, 1, 2, 3 }, tensor.arange(4))
    same({ 2, 4, 6 }, tensor.arange(2, 8, 2))
    same({ 0, 0.5, 1 }, tensor.linspace(0, 1, 3))
    assert.are.same({ 5, 4 }, tensor.empty(5, 4):size())
  end)

  it("refuse a tensor over the size cap before allocating it, naming both", function()
    -- 4e13 bytes: under overcommit this once "succeeded" and then filled RAM writing zeros
    assert.error_matches(function() tensor.zeros(100000, 100000, 1000) end,
                         "100000 x 100000 x 1000 float32 tensor takes 40000000000000 bytes, over the cap of %d+")
    assert.error_matches(function() tensor.randn(1 << 40, 1 << 40) end, "over the cap")   -- overflows int64
    local cap = tensor.max_bytes()
    assert.is_true(cap > 0)
    tensor.set_max_bytes(1000)
    local ok, err = pcall(tensor.ones, 251)
    tensor.set_max_bytes(cap)
    assert.is_false(ok)
    assert.matches("251 float32 tensor takes 1004 bytes, over the cap of 1000 bytes %(tensor.set_max_bytes%)", err)
    assert.are.equal(cap, tensor.max_bytes())
    assert.error_matches(function() tensor.set_max_bytes(-1) end, "must be > 0")
    -- arange too: arange(0, 2^32, 2) allocated its 16 GiB past any cap
    tensor.set_max_bytes(1000)
    local big_ok, big_err = pcall(tensor.arange, 0, 1 << 32, 2)
    local small = tensor.arange(0, 250, 2)
    tensor.set_max_bytes(cap)
    assert.is_false(big_ok)
    assert.matches("2147483648 int64 tensor takes 17179869184 bytes, over the cap of 1000 bytes", big_err)
    assert.are.equal(125, small:numel())
  end)

  it("infers dtypes from Lua values as PyTorch does", function()
    assert.are.equal("int64", T { 1, 2 }:dtype())
    assert.are.equal("float32", T { 1, 2.5 }:dtype())
    assert.are.equal("bool", T { true, false }:dtype())
    assert.are.equal("float64", tensor.new({ 1 }, "float64"):dtype())
    assert.are.equal(0, T(3.5):dim())
  end)

  it("supports every dtype", function()
    for _, d in ipairs { "float32", "float64", "float16", "bfloat16", "int64", "int32", "int8",
                         "uint8", "bool" } do
      assert.are.equal(d, tensor.zeros(2, { dtype = d }):dtype())
    end
  end)

  it("draws reproducibly from seeded generators", function()
    tensor.manual_seed(7)
    local a = tensor.rand(5):totable()
    tensor.manual_seed(7)
    assert.are.same(a, tensor.rand(5):totable())
    local g1, g2 = tensor.generator(3), tensor.generator(3)
    assert.are.same(tensor.randn(4, { generator = g1 }):totable(),
                    tensor.randn(4, { generator = g2 }):totable())
    local r = tensor.randint(2, 5, 1000)
    assert.is_true(r:min():item() >= 2 and r:max():item() <= 4)
    same({ 0, 1, 2, 3, 4, 5 }, tensor.randperm(6):sort())
  end)

  it("round-trips raw bytes", function()
    local a = T { { 1.5, -2 }, { 3, 4 } }
    local b = tensor.from_bytes(a:bytes(), "float32", 2, 2)
    same(a:totable(), b)
    assert.are.equal(16, #a:bytes())
    assert.error_matches(function() tensor.from_bytes("abc", "float32", 1) end, "3 bytes")
    -- checked before allocating: 8 bytes as 2^32 x 4 values allocated 64 GiB first
    local t0 = os.clock()
    assert.error_matches(function() tensor.from_bytes(("\0"):rep(8), "float32", 1 << 32, 4) end,
                         "got 8 bytes, but 68719476736 are needed")
    assert.error_matches(function() tensor.from_bytes("", "float32", 1 << 62, 1 << 62) end, "over 2%^64")
    assert.are.same({ 0, 1 << 62 }, tensor.from_bytes("", "float32", 0, 1 << 62):size())
    assert.is_true(os.clock() - t0 < 1)
  end)

  it("rejects ragged tables and bad elements", function()
    assert.error_matches(function() T { { 1, 2 }, { 3 } } end, "ragged")
    assert.error_matches(function() T { "a" } end, "numbers or booleans")
    assert.error_matches(function() tensor.zeros(2, "float128") end, "unknown dtype 'float128'")
    assert.error_matches(function() tensor.zeros(2, { device = "tpu" }) end, "unknown device 'tpu'")
  end)

  it("refuses a table whose __len claims more values than memory holds (it wrote past the buffer)", function()
    local rows = setmetatable({}, { __len = function() return 1 << 61 end,
                                    __index = function() return { 1, 2, 3, 4, 5, 6, 7, 8 } end })
    assert.error_matches(function() tensor.new(rows) end, "more values than memory holds")
    assert.error_matches(function() tensor.new(setmetatable({}, { __len = function() return -5 end })) end,
                         "a table of length %-5")
  end)

  it("keeps int64 values past 2^53 exact (new, full, fill_, t[i] =, scalar ops)", function()
    local big, max = (1 << 53) + 1, math.maxinteger
    assert.are.equal(big, T { big }[0]:item())
    assert.are.same({ max, math.mininteger }, T { max, math.mininteger }:totable())
    assert.are.same({ big, big }, tensor.full(2, big, "int64"):totable())
    assert.are.same({ max }, tensor.full({ 1 }, max, "int64"):totable())
    assert.are.equal(max, tensor.zeros(1, "int64"):fill_(max)[0]:item())
    assert.are.equal(big, tensor.zeros(1, "int64"):add_(big)[0]:item())
    assert.are.equal(max, (tensor.zeros(1, "int64") + max)[0]:item())
    assert.are.equal(max - 1, (max - tensor.ones(1, "int64"))[0]:item())
    local t = tensor.zeros(2, "int64")
    t[1] = big
    assert.are.same({ 0, big }, t:totable())
    assert.are.equal("float32", T { big, 0.5 }:dtype())   -- a float among them: float32, as before
  end)
end)

describe("tensor shape ops", function()
  local a = tensor.arange(6):reshape(2, 3)   -- [[0,1,2],[3,4,5]]

  it("reshapes, views, flattens and permutes", function()
    same({ { 0, 1 }, { 2, 3 }, { 4, 5 } }, a:view(3, 2))
    same({ 0, 1, 2, 3, 4, 5 }, a:flatten())
    same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, a:transpose(0, 1))
    same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, a:permute(1, 0))
    same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, a:t())
    assert.are.same({ 1, 2, 1, 3 }, a:unsqueeze(0):unsqueeze(2):size())
    assert.are.same({ 2, 3 }, a:unsqueeze(0):squeeze():size())
    assert.are.same({ 2, 2, 3 }, a:unsqueeze(0):expand(2, 2, 3):size())
  end)

  it("indexes 0-based: t[i], select, narrow, index_select, masked_select, gather", function()
    same({ 3, 4, 5 }, a[1])
    assert.are.equal(5, a[1][2]:item())
    assert.are.equal(5, a[-1][-1]:item())
    same({ 1, 4 }, a:select(1, 1))
    same({ { 1, 2 }, { 4, 5 } }, a:narrow(1, 1, 2))
    same({ { 2, 0 }, { 5, 3 } }, a:index_select(1, T { 2, 0 }))
    same({ 3, 4, 5 }, a:masked_select(a:gt(2)))
    same({ { 1 }, { 5 } }, a:gather(1, T { { 1 }, { 2 } }))
    assert.error_matches(function() return a[2] end, "out of range")
  end)

  it("cats, stacks, splits and chunks", function()
    same({ { 0, 1, 2 }, { 3, 4, 5 }, { 0, 1, 2 }, { 3, 4, 5 } }, tensor.cat({ a, a }))
    same({ { 0, 1, 2, 0, 1, 2 }, { 3, 4, 5, 3, 4, 5 } }, tensor.cat({ a, a }, 1))
    assert.are.same({ 2, 2, 3 }, tensor.stack({ a, a }):size())
    local parts = tensor.arange(5):split(2)
    assert.are.equal(3, #parts)
    same({ 4 }, parts[3])
    assert.are.equal(2, #tensor.arange(4):chunk(2))
    assert.error_matches(function() tensor.cat({ a, tensor.zeros(2, 2) }) end, "torch:")
  end)

  it("assigns rows through t[i] = value", function()
    local z = tensor.zeros(2, 2)
    z[0] = 3
    z[1] = T { 1.0, 2.0 }
    same({ { 3, 3 }, { 1, 2 } }, z)
  end)
end)

describe("tensor math", function()
  local a = T { { 1.0, 2.0 }, { 3.0, 4.0 } }

  it("has arithmetic metamethods with tensors and numbers, broadcasting", function()
    same({ { 2, 4 }, { 6, 8 } }, a + a)
    same({ { 0, 1 }, { 2, 3 } }, a - 1)
    same({ { 9, 8 }, { 7, 6 } }, 10 - a)
    same({ { 2, 4 }, { 6, 8 } }, 2 * a)
    same({ { 0.5, 1 }, { 1.5, 2 } }, a / 2)
    same({ { 1, 0 }, { 1, 0 } }, a % 2)
    same({ { 1, 4 }, { 9, 16 } }, a ^ 2)
    same({ { -1, -2 }, { -3, -4 } }, -a)
    same({ { 11, 22 }, { 13, 24 } }, a + T { 10.0, 20.0 })
    same({ { 7, 10 }, { 15, 22 } }, a:matmul(a))
    same({ { 3, 4 }, { 5, 6 } }, a:add(T { { 1.0, 1.0 }, { 1.0, 1.0 } }, 2))
  end)

  it("keeps integer tensors integer with integer scalars, as PyTorch", function()
    assert.are.equal("int64", (T { 1, 2 } * 2):dtype())
    assert.are.equal("float32", (T { 1, 2 } * 0.5):dtype())
    same({ 1, 0 }, T { -3, 4 } % 2)   -- floored, as Lua's %
  end)

  it("computes elementwise functions", function()
    same({ 1, 2 }, T { 1.0, 4.0 }:sqrt())
    same({ 1.5, 0 }, T { -1.5, 0.0 }:abs())
    same({ -1, 0, 1 }, T { -2.0, 0.0, 3.0 }:sign())
    same({ 0, 3 }, T { -1.0, 3.0 }:relu())
    same({ 0.5 }, T { 0.0 }:sigmoid())
    same({ 2, 3 }, T { 2.0, 3.0 }:log():exp():round())
    same({ 0, 1, 2 }, T { -1.0, 1.0, 5.0 }:clamp(0, 2))
    same({ 0, 1, 5 }, T { -1.0, 1.0, 5.0 }:clamp(0))
    same({ true, false }, T { 1, 2 }:lt(2))
    same({ false, true }, T { 1, 2 }:eq(T { 0, 2 }))
    same({ 3, 1 }, tensor.where(T { true, false }, T { 3, 3 }, T { 1, 1 }))
  end)

  it("gives a symmetric matrix's eigenvalues, ascending (eigvalsh)", function()
    -- the path's Laplacian 2, -1 tridiagonal: 2 - 2 cos(k pi / 4), k = 1..3
    local e = tensor.new({ { 2, -1, 0 }, { -1, 2, -1 }, { 0, -1, 2 } }, "float64"):eigvalsh()
    for k = 1, 3 do assert.is_true(math.abs(e[k - 1]:item() - (2 - 2 * math.cos(k * math.pi / 4))) < 1e-12) end
    assert.error_matches(function() T { 1.0, 2.0 }:eigvalsh() end, "at least 2 dimensions")
  end)

  it("updates in place", function()
    local z = tensor.zeros(2)
    z:add_(1):mul_(3):sub_(T { 1.0, 2.0 })
    same({ 2, 1 }, z)
    z:fill_(5)
    same({ 5, 5 }, z)
    z:zero_()
    same({ 0, 0 }, z)
    z:copy_(T { 7.0, 8.0 })
    same({ 7, 8 }, z)
  end)

  it("reduces over all elements or a dim", function()
    local m = T { { 1.0, 5.0, 3.0 }, { 4.0, 2.0, 6.0 } }
    assert.are.equal(21, m:sum():item())
    same({ 5, 7, 9 }, m:sum(0))
    same({ { 9 }, { 12 } }, m:sum(1, true))
    assert.are.equal(3.5, m:mean():item())
    assert.are.equal(720, m:prod():item())
    assert.are.equal(6, m:max():item())
    local v, i = m:max(1)
    same({ 5, 6 }, v)
    same({ 1, 2 }, i)
    same({ 0, 1, 0 }, m:argmin(0))
    assert.are.equal(5, m:argmax():item())
    assert.are.equal(3, m:median():item())   -- the lower of the two middle values
    assert.is_true(math.abs(m:std():item() - 1.870829) < 1e-5)
    assert.is_true(math.abs(m:var(nil, false, false):item() - 2.916667) < 1e-5)
    assert.is_true(math.abs(T { 3.0, 4.0 }:norm():item() - 5) < 1e-6)
    assert.are.equal(7, T { 3.0, -4.0 }:norm(1):item())
    assert.are.same({ 5, 13 }, T { { 3.0, 4.0 }, { 5.0, 12.0 } }:norm(2, 1):totable())   -- the dim goes
    assert.are.same({ 2, 1 }, T { { 3.0, 4.0 }, { 5.0, 12.0 } }:norm(2, 1, true):size())
    same({ 1, 3, 6 }, T { 1, 2, 3 }:cumsum(0))
    assert.is_true(T { true, true }:all():item())
    assert.is_false(T { false, false }:any():item())
    local s, si = T { 3, 1, 2 }:sort()
    same({ 1, 2, 3 }, s)
    same({ 1, 2, 0 }, si)
    local tv, ti = T { 3, 1, 2 }:topk(2)
    same({ 3, 2 }, tv)
    same({ 0, 2 }, ti)
    local kv = T { 3, 1, 2 }:kthvalue(2)
    assert.are.equal(2, kv:item())
    local sm = T { { 0.0, 0.0 } }:softmax(1)
    same({ { 0.5, 0.5 } }, sm)
    assert.error_matches(function() T { 1, 2 }:mean() end, "torch:")
  end)
end)

describe("tensor conversion", function()
  it("converts dtypes and reads values", function()
    local a = T { 1.7, -2.2 }
    same({ 1, -2 }, a:to("int64"))
    assert.are.equal("float64", a:double():dtype())
    assert.are.equal(3, T(3):item())
    assert.are.equal(#a, 2)
    assert.error_matches(function() return a:item() end, "one element")
    assert.error_matches(function() return #T(1) end, "0%-d tensor")
  end)

  it("clones deeply and shares on views", function()
    local a = tensor.zeros(3)
    local c = a:clone()
    local v = a:narrow(0, 0, 2)
    v:fill_(1)
    same({ 1, 1, 0 }, a)
    same({ 0, 0, 0 }, c)
  end)

  it("saves and loads a tensor file", function()
    local path = tmpdir() .. "/t.pt"
    local a = T { { 1.5, 2 }, { 3, 4 } }
    assert.is_true(a:save(path))
    same(a:totable(), tensor.load(path))
    local t, err = tensor.load(tmpdir() .. "/missing.pt")
    assert.is_nil(t)
    assert.matches("cannot open", err)
  end)

  it("loads a file once per process, read-only, and a changed file again (load_shared)", function()
    local path = tmpdir() .. "/s.pt"
    assert.is_true(T { 1, 2, 3 }:save(path))
    local a = assert(tensor.load_shared(path))
    same({ 1, 2, 3 }, a)
    same({ 1, 2, 3 }, tensor.load_shared(path))
    assert.has_error(function() a:fill_(0) end)   -- shared with every other state of the process
    same({ 1, 2, 3 }, tensor.load_shared(path))
    require("dpy.host.core").sleep(0.01)   -- a new mtime even where the file system's clock is coarse
    assert.is_true(T { 4, 5, 6, 7 }:save(path))
    same({ 4, 5, 6, 7 }, tensor.load_shared(path))
    local t, err = tensor.load_shared(tmpdir() .. "/missing.pt")
    assert.is_nil(t)
    assert.matches("missing.pt: No such file", err)
  end)

  it("keeps read-only what shares a read-only tensor's storage (detach, contiguous, to its own dtype)", function()
    local path = tmpdir() .. "/r.pt"
    assert.is_true(T { 1.5, 2, 3 }:save(path))
    local ro = assert(tensor.load_shared(path))
    for _, how in ipairs { "detach", "contiguous", "float", "clone", "double" } do
      local v = ro[how](ro)
      local copy = how == "clone" or how == "double"
      assert.are.equal(not copy, v:is_readonly(), how)
      if not copy then assert.error_matches(function() v:add_(1) end, "read%-only", nil, how) end
    end
    assert.is_false(ro:to("float32"):clone():is_readonly())
    same({ 1.5, 2, 3 }, tensor.load_shared(path))   -- every state of the process reads these values
    local m = require("dpy.nn").linear(2, 1)
    local flat = m:share_flat()
    assert.has_error(function() flat:detach():fill_(7) end)
  end)

  it("refuses a file of which a member fails its CRC (tensor.load, load_shared, m:load, set_state)", function()
    -- torch reads an archive's members without their CRCs: a bit flipped in a value was a number
    local function flip(path)
      local f = assert(io.open(path, "rb"))
      local bytes = f:read("a")
      f:close()
      local at = assert(bytes:find(string.pack("<f<f", 1, 1), 1, true)) + 100   -- within the values
      f = assert(io.open(path, "wb"))
      f:write(bytes:sub(1, at - 1), string.char(bytes:byte(at) ~ 0x40), bytes:sub(at + 1))
      f:close()
    end
    local dir = tmpdir()
    assert.is_true(tensor.ones(256):save(dir .. "/t.pt"))
    flip(dir .. "/t.pt")
    for _, load in ipairs { tensor.load, tensor.load_shared } do
      local t, err = load(dir .. "/t.pt")
      assert.is_nil(t)
      assert.matches(dir .. "/t.pt: archive/data/0: corrupt member (CRC error)", err, 1, true)
    end
    local nn = require "dpy.nn"
    local m = nn.linear(16, 16)
    tensor.no_grad(function() m:parameters()[1]:fill_(1) end)
    assert.is_true(m:save(dir .. "/m.pt"))
    flip(dir .. "/m.pt")
    local ok, err = m:load(dir .. "/m.pt")
    assert.is_nil(ok)
    assert.matches(dir .. "/m.pt: m/data/0: corrupt member (CRC error)", err, 1, true)
    local opt = require("dpy.optim").sgd(m, { lr = 0.1, momentum = 0.9 })
    local state = opt:state()
    local at = #state // 2
    assert.error_matches(function()
      opt:set_state(state:sub(1, at - 1) .. string.char(state:byte(at) ~ 0x40) .. state:sub(at + 1))
    end, "^optimizer state: not a readable zip archive")
  end)

  it("prints a header and the values", function()
    local s = tostring(T { { 1.0, 2.5 } })
    assert.matches("^dpy.Tensor%(float32, cpu, %[1, 2%]%)\n", s)
    assert.matches("2.5000", s)
    local big = tostring(tensor.zeros(100, 100))
    assert.matches("%.%.%.", big)
    assert.is_true(#big < 2000)
  end)
end)

describe("autograd", function()
  it("computes the gradient of a small function", function()
    -- f(x) = sum(x^2 * 3 + x), df/dx = 6x + 1
    local x = T { 1.0, -2.0, 0.5 }:requires_grad_()
    local y = ((x ^ 2) * 3 + x):sum()
    y:backward()
    same({ 7, -11, 4 }, x:grad())
    assert.is_true(x:requires_grad())
    assert.is_false(x:detach():requires_grad())
  end)

  it("turns autograd off inside no_grad and restores it", function()
    local x = T { 1.0 }:requires_grad_()
    local y = tensor.no_grad(function() return x * 2 end)
    assert.is_false(y:requires_grad())
    assert.is_true((x * 2):requires_grad())
    assert.has_error(function() tensor.no_grad(function() error("boom") end) end)
    assert.is_true((x * 2):requires_grad())
  end)

  it("keeps no_grad to its function when a coroutine yields inside it", function()
    local x = T { 1.0 }:requires_grad_()
    local co = coroutine.wrap(function(a)
      return tensor.no_grad(function()
        local b = coroutine.yield(a, (x * 2):requires_grad())   -- off inside
        local c = coroutine.yield(b, (x * 2):requires_grad())   -- off again once resumed
        return c, tensor.no_grad(function() return coroutine.yield("nested", (x * 2):requires_grad()) end)
      end)
    end)
    local v, on = co(1)
    assert.are.same({ 1, false }, { v, on })
    assert.is_true((x * 2):requires_grad())   -- the resumer's own mode while it is suspended
    v, on = co(2)
    assert.are.same({ 2, false }, { v, on })
    assert.is_true((x * 2):requires_grad())
    v, on = co(3)
    assert.are.same({ "nested", false }, { v, on })
    assert.is_true((x * 2):requires_grad())
    assert.are.same({ 3, 4 }, { co(4) })
    assert.is_true((x * 2):requires_grad())
    tensor.no_grad(function()   -- a coroutine resumed inside no_grad runs in the resumer's mode
      local inner = coroutine.wrap(function() coroutine.yield((x * 2):requires_grad()) end)
      assert.is_false(inner())
      assert.is_false((x * 2):requires_grad())
    end)
    assert.is_true((x * 2):requires_grad())
  end)

  it("reports backward through a non-scalar without a gradient", function()
    local x = T { 1.0, 2.0 }:requires_grad_()
    assert.error_matches(function() (x * 2):backward() end, "torch: grad can be implicitly created only for scalar")
  end)
end)

describe("tensor errors", function()
  it("names the bad argument", function()
    local a = tensor.ones(2)
    assert.error_matches(function() return a:add({}) end, "bad argument #1 to 'add' %(dpy.Tensor expected, got table%)")
    assert.error_matches(function() return a:narrow(0, "x", 1) end, "number expected")
  end)

  it("turns a libtorch exception into a Lua error with both shapes", function()
    local ok, err = pcall(function() return tensor.ones(2) + tensor.ones(3) end)
    assert.is_false(ok)
    assert.matches("torch: The size of tensor a %(2%) must match the size of tensor b %(3%)", err)
    assert.error_matches(function() tensor.ones(2, 3):matmul(tensor.ones(2, 3)) end, "2x3 and 2x3")
  end)

  it("refuses use after free, and free is idempotent", function()
    local a = tensor.ones(2)
    a:free()
    a:free()
    assert.error_matches(function() return a + a end, "use of a freed dpy.Tensor")
    assert.are.equal("dpy.Tensor(freed)", tostring(a))
  end)

  it("frees with <close>", function()
    local kept
    do
      local a <close> = tensor.ones(2)
      kept = a
    end
    assert.error_matches(function() return kept:sum() end, "freed")
  end)
end)

describe("devices", function()
  it("refuses cuda clearly when the build has no device", function()
    if require("dpy.host.core").versions().cuda_devices > 0 then return end
    assert.error_matches(function() tensor.zeros(2, { device = "cuda" }) end,
                         "device 'cuda' requested, but this libtorch build sees no CUDA or ROCm device")
  end)

  it("moves tensors and modules to cuda and back #gpu", function()
    local nn = require "dpy.nn"
    local a = tensor.ones(2, 2):to("cuda")
    assert.are.equal("cuda:0", a:device())
    assert.are.same({ { 2, 2 }, { 2, 2 } }, (a + a):to("cpu"):totable())
    local m = nn.linear(2, 1):to("cuda")
    assert.are.equal("cuda:0", m(a):device())
  end)
end)

describe("tensor memory", function()
  it("stays bounded when a loop forgets to free (the GC nudge)", function()
    local host = require "dpy.host.core"
    local before = host.memory().tensor_live
    for _ = 1, 400 do
      local _ = tensor.zeros(256, 1024)   -- 1 MiB each, never freed by hand
    end
    local live = host.memory().tensor_live - before
    assert.is_true(live < 160 * 2 ^ 20, string.format("%.0f MiB still live", live / 2 ^ 20))
  end)

  -- A node's build viewed the process's 47 MB of training images (unsqueeze) after its box of
  -- them: counted twice, they passed the nudge's 64 MiB, and every node ran a full collection.
  it("counts only what a box alone holds: views and the data the process shares add nothing", function()
    local host = require "dpy.host.core"
    local function live() collectgarbage("collect") return host.memory().tensor_live end
    local x <close> = tensor.zeros(1024, 1024)   -- 4 MiB of its own
    local before = live()
    local views = { x:view(-1), x:unsqueeze(0), x:narrow(0, 0, 512), x:t(), x:reshape { 512, 2048 } }
    local ds = require("dpy.data").fashion_mnist { train = false }   -- read once a process
    local images = ds.images:squeeze(1)
    assert.are.equal(before, live())
    local y <close> = x + 1
    assert.are.equal(before + 4 * 2 ^ 20, live())
    y:free()
    for _, v in ipairs(views) do v:free() end
    assert.are.equal(before, live())
    assert.are.equal(10000, images:size(0))
    -- an output autograd keeps for the backward pass is the box's alone once the graph goes
    local w <close> = tensor.randn(1024, 1024):requires_grad_()
    local r <close> = w:relu()
    local s <close> = w:sigmoid()
    assert.are.equal(before + 3 * 4 * 2 ^ 20, live())
    assert.are.equal(2 * 2 ^ 20, r:numel() + s:numel())
  end)

  it("frees the copies C functions make for their own use at once, not at the next GC", function()
    -- a transposed tensor is not contiguous: the encoder works on a 4 MiB copy of it each call
    local host = require "dpy.host.core"
    local codec = require "dpy.codec.core"
    local x <close> = tensor.randn(1024, 1024):t()
    collectgarbage("stop")
    local before = host.memory().rss
    for _ = 1, 100 do codec.quantize(x, 8):free() end
    local grown = host.memory().rss - before
    collectgarbage("restart")
    assert.is_true(grown < 100 * 2 ^ 20, string.format("rss grew by %.0f MiB", grown / 2 ^ 20))
  end)

  -- The kernel's own accounting (AnonHugePages) says which pages came: jemalloc asks for huge
  -- ones (launch.c), and a run with huge_pages = false turns them off for its process (heap.c).
  it("comes in transparent huge pages, and in 4 KiB pages once huge_pages is off", function()
    local host = require "dpy.host.core"
    local f = io.open("/sys/kernel/mm/transparent_hugepage/enabled")
    local mode = f and f:read("a") or "[never]"
    if f then f:close() end
    if host.versions().allocator ~= "jemalloc" or mode:find("[never]", 1, true) then
      pending("no huge pages: allocator " .. host.versions().allocator .. ", kernel " .. mode) return
    end
    local function huge_kib()
      for line in io.lines("/proc/self/smaps_rollup") do
        local kib = line:match("^AnonHugePages:%s+(%d+)")
        if kib then return tonumber(kib) end
      end
    end
    assert.is_true(host.huge_pages(true))   -- whatever this process inherited
    local before = huge_kib()
    local on <close> = tensor.ones(1 << 22)   -- 16 MiB, written
    local grown_on = huge_kib() - before
    assert.is_true(host.huge_pages(false))
    before = huge_kib()
    local off <close> = tensor.ones(1 << 22)
    local grown_off = huge_kib() - before
    assert.is_true(host.huge_pages(true))
    assert.are.equal(2 * (1 << 22), on:sum():item() + off:sum():item())
    assert.is_true(grown_on >= 8192, string.format("%d KiB of 16 MiB in huge pages", grown_on))
    -- none grew (a huge page the process gave back meanwhile reads as less: 4096 KiB once)
    assert.is_true(grown_off <= 0, string.format("%d KiB more in huge pages with them off", grown_off))
  end)

  it("refuses a dim of a 0-d tensor", function()
    assert.error_matches(function() return tensor.new(1.5):size(0) end, "dim 0 out of range for a 0%-d tensor")
  end)
end)
