-- dpy.nn: every layer's output shape, containers, parameters, flat vectors, losses.
local tensor = require "dpy.tensor"
local nn = require "dpy.nn"
local registry = require "dpy.registry"
local host = require "dpy.host.core"

local function shape(m, x) return m(x):size() end

describe("nn layers", function()
  it("give the expected output shapes", function()
    local img = tensor.randn(2, 3, 8, 8)
    assert.are.same({ 2, 5 }, shape(nn.linear(4, 5), tensor.randn(2, 4)))
    assert.are.same({ 2, 6, 8, 8 }, shape(nn.conv2d(3, 6, 3, { padding = 1 }), img))
    assert.are.same({ 2, 6, 3, 3 }, shape(nn.conv2d(3, 6, 3, { stride = 2 }), img))
    assert.are.same({ 2, 3, 4, 4 }, shape(nn.maxpool2d(2), img))
    assert.are.same({ 2, 3, 4, 4 }, shape(nn.avgpool2d(2), img))
    assert.are.same({ 2, 3, 1, 1 }, shape(nn.adaptive_avgpool2d(1), img))
    assert.are.same({ 2, 3, 8, 8 }, shape(nn.batchnorm2d(3), img))
    assert.are.same({ 2, 3, 8, 8 }, shape(nn.groupnorm(3, 3), img))
    assert.are.same({ 2, 3, 8, 8 }, shape(nn.layernorm({ 8, 8 }), img))
    assert.are.same({ 2, 192 }, shape(nn.flatten(), img))
    assert.are.same({ 2, 3, 4 }, shape(nn.embedding(10, 4), tensor.new { { 1, 2, 3 }, { 4, 5, 6 } }))
    for _, f in ipairs { "relu", "gelu", "tanh", "sigmoid", "identity" } do
      assert.are.same({ 2, 3, 8, 8 }, shape(nn[f](), img))
    end
    assert.are.same({ 2, 4 }, shape(nn.softmax(1), tensor.randn(2, 4)))
    assert.are.same({ 2, 4 }, shape(nn.log_softmax(1), tensor.randn(2, 4)))
    assert.are.same({ 2, 4 }, shape(nn.dropout(0.5), tensor.randn(2, 4)))
  end)

  it("computes a linear layer exactly", function()
    local l = nn.linear(2, 1)
    l:set_flat(tensor.new { 2.0, 3.0, 1.0 })   -- weight {2, 3}, bias 1
    assert.are.same({ { 6 } }, l(tensor.new { { 1.0, 1.0 } }):totable())
    assert.are.same({ "weight", "bias" }, select(2, l:named_parameters()))
  end)

  it("drops out in training mode only, reproducibly from the seed", function()
    local d = nn.dropout(0.5)
    local x = tensor.ones(1000)
    tensor.manual_seed(3)
    local a = d(x):totable()
    tensor.manual_seed(3)
    assert.are.same(a, d(x):totable())
    local zeros = 0
    for _, v in ipairs(a) do if v == 0 then zeros = zeros + 1 end end
    assert.is_true(zeros > 400 and zeros < 600)
    d:eval()
    assert.are.same(x:totable(), d(x):totable())
  end)

  it("reports a shape mismatch with the shapes", function()
    assert.error_matches(function() nn.linear(4, 2)(tensor.zeros(3, 5)) end, "3x5 and 4x2")
    assert.error_matches(function() nn.linear(4, 2, { bais = false }) end,
                         "unknown option 'bais' %(did you mean 'bias'%?%)")
    assert.error_matches(function() nn.conv2d(1, 2, 3)(tensor.zeros(1, 3, 8, 8)) end, "torch:")
  end)
end)

describe("nn layer arguments", function()
  it("refuses a size, stride or dim that is not an integer, and an eps or momentum not finite", function()
    -- 2.5 was cut to 2 (a layer of another shape, silently); a NaN eps made every output NaN
    assert.error_matches(function() nn.linear(2.5, 3) end,
                         "nn.linear: sizes, strides and dims must be integers, got 2.5")
    assert.error_matches(function() nn.linear(3, 0 / 0) end, "must be integers, got %-?nan")
    assert.error_matches(function() nn.conv2d(1, 1, 2, { stride = 1.5 }) end, "nn.conv2d: .* got 1.5")
    assert.error_matches(function() nn.maxpool2d(2, { padding = 2 ^ 63 }) end, "must be integers")
    assert.error_matches(function() nn.layernorm({ 4, 2.5 }) end, "got 2.5")
    assert.error_matches(function() nn.softmax(0.5) end, "got 0.5")
    assert.error_matches(function() nn.batchnorm2d(1, { eps = 0 / 0 }) end,
                         "nn.batchnorm2d: eps must be a finite number > 0")
    assert.error_matches(function() nn.batchnorm2d(1, { momentum = 1 / 0 }) end,
                         "momentum must be in %[0, 1%], got inf")
    assert.error_matches(function() nn.groupnorm(1, 2, { eps = -1 }) end, "eps must be a finite number > 0, got %-1")
    assert.error_matches(function() nn.layernorm(4, { eps = 0 }) end, "eps must be")
    assert.are.equal(9, nn.linear(2.0, 3):numel())   -- an integral float is a size (4 / 2)
  end)
end)

describe("nn layer sizes", function()
  it("refuses a layer whose parameters are over tensor.max_bytes(), naming the layer, its size and the cap", function()
    local cap = tensor.max_bytes()
    tensor.set_max_bytes(1000)
    local got = {}
    for name, make in pairs {
      linear = function() return nn.linear(16, 16) end,   -- 272 floats
      conv2d = function() return nn.conv2d(4, 8, 3) end,   -- 296
      embedding = function() return nn.embedding(100, 4) end,   -- 400
      batchnorm2d = function() return nn.batchnorm2d(100) end,   -- 400 and a counter
      groupnorm = function() return nn.groupnorm(2, 200) end,   -- 400
      layernorm = function() return nn.layernorm({ 10, 20 }) end,   -- 400
    } do
      local ok, err = pcall(make)
      got[name] = not ok and err:match("nn%.%w+: %d+ float32 parameters.- take %d+ bytes, over the cap of 1000 bytes")
                  and true or err
    end
    local small_ok, small = pcall(nn.linear, 4, 4)
    tensor.set_max_bytes(cap)
    assert.are.same({ linear = true, conv2d = true, embedding = true, batchnorm2d = true, groupnorm = true,
                      layernorm = true }, got)
    assert.is_true(small_ok)
    assert.are.equal(20, small:numel())
    -- nn.linear(1e6, 1e6) allocated its 4 TB (or the OOM killer ended the run)
    assert.error_matches(function() nn.linear(1e6, 1e6) end,
                         "nn.linear: 1000001000000 float32 parameters take 4000004000000 bytes, over the cap of %d+ "
                         .. "bytes %(tensor.set_max_bytes%)")
    assert.error_matches(function() nn.linear(1 << 40, 1 << 40) end, "nn.linear: .* take over 2%^64 bytes")
  end)
end)

describe("nn containers", function()
  it("runs a sequential in C++ and names children 0, 1, ...", function()
    local m = nn.sequential { nn.linear(4, 3), nn.relu(), nn.linear(3, 2) }
    assert.is_true(m:is_native())
    assert.are.same({ 5, 2 }, shape(m, tensor.randn(5, 4)))
    local _, names = m:named_parameters()
    assert.are.same({ "0.weight", "0.bias", "2.weight", "2.bias" }, names)
    assert.are.equal(4 * 3 + 3 + 3 * 2 + 2, m:numel())
  end)

  it("builds custom modules with a Lua forward", function()
    local m = nn.module {
      fc1 = nn.linear(4, 8),
      fc2 = nn.linear(8, 2),
      forward = function(self, x) return self.fc2(self.fc1(x):tanh()) end,
    }
    assert.is_false(m:is_native())
    assert.are.same({ 3, 2 }, shape(m, tensor.randn(3, 4)))
    assert.are.equal(4 * 8 + 8 + 8 * 2 + 2, m:numel())
    assert.are.same({ 3, 2 }, m:forward(tensor.randn(3, 4)):size())
    -- and as a child of a sequential (which then runs in Lua)
    local s = nn.sequential { m, nn.relu() }
    assert.is_false(s:is_native())
    assert.are.same({ 3, 2 }, shape(s, tensor.randn(3, 4)))
    assert.error_matches(function() nn.module { fc = 3, forward = function() end } end, "not a dpy.Module")
  end)

  it("moves parameters as one flat float32 vector", function()
    local m = nn.sequential { nn.linear(3, 2), nn.linear(2, 1) }
    local flat = m:get_flat()
    assert.are.same({ 11 }, flat:size())
    local target = tensor.arange(11):float()
    m:set_flat(target)
    assert.are.same(target:totable(), m:get_flat():totable())
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, m:parameters()[1]:totable())
    assert.error_matches(function() m:set_flat(tensor.zeros(10)) end, "11 values")
    -- gradients, zeros before any backward
    assert.are.same(tensor.zeros(11):totable(), m:grad_flat():totable())
  end)

  it("mixes in place with weighted flat vectors (gossip averaging)", function()
    local m = nn.linear(2, 1)
    m:set_flat(tensor.new { 1.0, 2.0, 3.0 })
    m:mix(0.5, { tensor.new { 3.0, 4.0, 5.0 }, tensor.new { 0.0, 0.0, 10.0 } }, { 0.25, 0.25 })
    -- 0.5 * {1, 2, 3} + 0.25 * {3, 4, 5} + 0.25 * {0, 0, 10}
    assert.are.same({ 1.25, 2, 5.25 }, m:get_flat():totable())
    assert.error_matches(function() m:mix(1, { tensor.zeros(2) }, { 1 }) end, "3 values")
    assert.error_matches(function() m:mix(1, { tensor.zeros(3) }, {}) end, "one weight per tensor")
  end)

  it("mixes models larger than one block, and inputs of another dtype, alike", function()
    local m = nn.linear(100, 50)   -- 5050 values: several blocks of the float32 path
    local own = m:get_flat()
    local a, b = tensor.randn(5050), tensor.randn(5050)
    local want = own * 0.5 + a * 0.3 + b * 0.2
    m:mix(0.5, { a, b }, { 0.3, 0.2 })
    assert.is_true((m:get_flat() - want):abs():max():item() < 1e-6)
    m:set_flat(own)
    m:mix(0.5, { a:to("float64"), b }, { 0.3, 0.2 })   -- not float32: libtorch's ops
    assert.is_true((m:get_flat() - want):abs():max():item() < 1e-6)
  end)

  it("mixes any number of terms, several passes of four, as one term at a time would", function()
    local m = nn.linear(100, 50)
    local own = m:get_flat()
    for _, n in ipairs { 0, 3, 4, 5, 9 } do
      local xs, ws, want = {}, {}, own * 0.1
      for j = 1, n do
        xs[j], ws[j] = tensor.randn(5050), j / 10
        want = want + xs[j] * ws[j]
      end
      m:set_flat(own)
      m:mix(0.1, xs, ws)
      assert.is_true((m:get_flat() - want):abs():max():item() < 1e-5, n .. " terms")
    end
  end)

  it("mixes in the model's own flat vector as any term, as a copy of it would (aliasing)", function()
    -- as the fifth term, the second pass read what the first had written: 0.75, 1.5
    local m = nn.linear(2, 1, { bias = false })
    m:set_flat(tensor.new { 1.0, 2.0 })
    local z = tensor.zeros(2)
    m:mix(0.5, { z, z, z, z, m:share_flat() }, { 0, 0, 0, 0, 0.5 })
    assert.are.same({ 1, 2 }, m:get_flat():totable())
    m:mix(0.5, { m:share_flat(), z }, { 0.25, 0.25 })
    assert.are.same({ 0.75, 1.5 }, m:get_flat():totable())
  end)

  it("shares one copy of models drawn alike until each is written (share_initial)", function()
    local function draw(seed)
      tensor.manual_seed(seed)
      return nn.sequential { nn.linear(2048, 2048), nn.linear(2048, 4) }   -- 16 MiB
    end
    local function same(m, t, tol) return (m:get_flat() - t):abs():max():item() <= (tol or 0) end
    local values = draw(21):get_flat()
    local rss, models = host.memory().rss, {}
    for i = 1, 8 do
      models[i] = draw(21)
      assert.is_true(models[i]:share_initial())
    end
    -- each model's own draw is given back as it shares, and the next draw takes its place: one
    -- copy held, where eight would be 128 MiB (jemalloc reuses freed memory at once)
    local grew = (host.memory().rss - rss) / 2 ^ 20
    if host.versions().allocator == "jemalloc" then assert.is_true(grew < 48, "grew " .. grew .. " MiB") end
    local other = draw(22)
    local own = other:get_flat()
    assert.is_true(other:share_initial())   -- a kind of its own: its values kept
    assert.is_true(same(other, own) and not same(other, values))
    -- every way of writing one of them leaves the others as drawn
    tensor.no_grad(function() for _, p in ipairs(models[1]:parameters()) do p:add_(1) end end)
    local _, names = models[2]:named_parameters()
    tensor.no_grad(function() models[2]:named_parameters()[names[1]]:mul_(0) end)
    models[3]:mix(0.5, { values + 2 }, { 0.5 })
    models[4]:set_flat(values + 3)
    models[5]:own_flat()
    local opt = require("dpy.optim").sgd(models[6], { lr = 0.1 })
    models[6](tensor.randn(2, 2048)):sum():backward()
    opt:step()
    tensor.no_grad(function() for _, p in ipairs(other:parameters()) do p:add_(1) end end)
    assert.is_true(same(models[1], values + 1))
    assert.is_true(same(models[3], values + 1, 1e-6))
    assert.is_true(same(models[4], values + 3))
    assert.is_false(same(models[2], values) or same(models[6], values))
    for i = 5, 8 do
      if i ~= 6 then assert.is_true(same(models[i], values), "model " .. i) end
    end
    assert.is_true(same(other, own + 1))
  end)

  it("builds a layer drawn alike before from the values it drew: the same bytes, tensors of its own", function()
    -- the process keeps a drawing layer's first values by kind, arguments and seed (initial_layers.cpp)
    local function draw(seed)
      tensor.manual_seed(seed)
      return nn.sequential { nn.conv2d(1, 2, 3), nn.flatten(), nn.linear(8, 3), nn.linear(3, 2, { bias = false }) }
    end
    local function same(a, b) return a:ne(b):sum():item() == 0 end
    local x = tensor.randn(2, 1, 4, 4)
    local first = draw(41)
    local values, out = first:get_flat(), first(x)
    tensor.no_grad(function() for _, p in ipairs(first:parameters()) do p:add_(1) end end)   -- written after
    local again = draw(41)
    assert.is_true(same(again:get_flat(), values) and same(again(x), out))
    assert.are.equal(#first:parameters(), #again:parameters())   -- the bias left out stays out
    assert.is_false(same(draw(42):get_flat(), values))
    -- its tensors are its own, forward uses them, and they take gradients
    tensor.no_grad(function() for _, p in ipairs(again:parameters()) do p:zero_() end end)
    assert.are.equal(0, again(x):abs():sum():item())
    assert.is_true(same(draw(41):get_flat(), values))
    again(x):sum():backward()
    for _, p in ipairs(again:parameters()) do assert.is_not_nil(p:grad()) end
  end)

  -- A layer drawn alike before is built on the values the process keeps, without a copy of them
  -- (initial_layers.cpp): every write moves it to values of its own first, as a shared model.
  it("loads a saved state into a model drawn alike, or sharing its initial copy, writing no other", function()
    local dir = tmpdir()
    local function draw(seed)
      tensor.manual_seed(seed)
      return nn.sequential { nn.conv2d(1, 2, 3), nn.flatten(), nn.linear(8, 3) }
    end
    local function same(m, t) return m:get_flat():ne(t):sum():item() == 0 end
    local values = draw(51):get_flat()
    local saved = draw(51)
    saved:set_flat(values + 1)
    assert.is_true(saved:save(dir .. "/m.pt"))
    local lent = draw(51)
    assert.is_true(lent:load(dir .. "/m.pt"))
    assert.is_true(same(lent, values + 1) and same(draw(51), values))
    local a, b = draw(51), draw(51)
    assert.is_true(a:share_initial() and b:share_initial())
    assert.is_true(a:load(dir .. "/m.pt"))
    assert.is_true(same(a, values + 1) and same(b, values))
  end)

  it("gives a model drawn alike whose parameters are not all float32 values of its own on write", function()
    local function draw(seed)
      tensor.manual_seed(seed)
      return nn.module { a = nn.linear(4, 3), b = nn.linear(3, 2),
                         forward = function(self, x) return self.b(self.a(x):double()) end }
    end
    local values = draw(54).a:get_flat()
    local m = draw(54)
    m.b:to("float64")
    tensor.no_grad(function() for _, p in ipairs(m:parameters()) do p:add_(1) end end)
    assert.is_true((m.a:get_flat() - values - 1):abs():max():item() < 1e-6)
    assert.are.equal(0, draw(54).a:get_flat():ne(values):sum():item())
    local mixed = draw(54)
    mixed.b:to("float64")
    mixed:own_flat()
    assert.are.equal(0, draw(54).a:get_flat():ne(values):sum():item())
  end)

  it("trains models drawn alike one after the other: a step of one leaves the graph of another valid", function()
    local function draw(seed)
      tensor.manual_seed(seed)
      return nn.sequential { nn.linear(4, 8), nn.relu(), nn.linear(8, 2) }
    end
    local values = draw(52):get_flat()
    local a, b = draw(52), draw(52)
    local x = tensor.randn(3, 4)
    local loss = a(x):sum()   -- a's graph holds its parameters for the backward pass
    local opt = require("dpy.optim").sgd(b, { lr = 0.1 })   -- b's step, with no own_flat first
    b(x):sum():backward()
    opt:step()
    loss:backward()
    for _, p in ipairs(a:parameters()) do assert.is_not_nil(p:grad()) end
    assert.is_true(b:get_flat():ne(values):sum():item() > 0)
    assert.are.equal(0, a:get_flat():ne(values):sum():item())
    assert.are.equal(0, draw(52):get_flat():ne(values):sum():item())
    opt:free()
  end)

  it("copies a shared model on write through a child module, a tied layer or the optimizer too", function()
    local function tied(seed)
      tensor.manual_seed(seed)
      local hidden = nn.linear(8, 8)
      return nn.module { inp = nn.linear(4, 8), h1 = hidden, h2 = hidden,
                         forward = function(self, x) return self.h2(self.h1(self.inp(x))) end }
    end
    local function sum(m) return m:get_flat():sum():item() end
    local a, b, c = tied(31), tied(31), tied(31)
    local opt = require("dpy.optim").sgd(a, { lr = 0.5 })   -- built first, as a node's is
    for _, m in ipairs { a, b, c } do assert.is_true(m:share_initial()) end
    local s0 = sum(c)
    tensor.no_grad(function() for _, p in ipairs(a.inp:parameters()) do p:add_(1) end end)   -- a child's
    b.h1:set_flat(tensor.zeros(b.h1:numel()))                                                -- a tied one's
    assert.are.equal(s0, sum(c))
    assert.is_true(sum(a) > s0 + 30 and sum(b) ~= s0)
    a:mix(1, {}, {})   -- a's whole model is its own again only once it is written as a whole
    local d = tied(31)
    local dopt = require("dpy.optim").sgd(d, { lr = 0.5 })
    assert.is_true(d:share_initial())
    d(tensor.randn(2, 4)):sum():backward()
    assert.error_matches(function() dopt:step() end, "other nodes still read its parameters")
    d:own_flat()
    dopt:step()
    assert.are.equal(s0, sum(c))
    assert.are_not.equal(s0, sum(d))
    opt:free()
  end)

  it("saves and loads its state", function()
    local dir = tmpdir()
    local a, b = nn.linear(3, 3), nn.linear(3, 3)
    assert.is_true(a:save(dir .. "/m.pt"))
    assert.is_true(b:load(dir .. "/m.pt"))
    assert.are.same(a:get_flat():totable(), b:get_flat():totable())
    local ok, err = b:load(dir .. "/missing.pt")
    assert.is_nil(ok)
    assert.is_string(err)
  end)

  it("switches train and eval, and refuses use after free", function()
    local m = nn.linear(2, 2)
    assert.is_true(m:is_training())
    assert.is_false(m:eval():is_training())
    assert.is_true(m:train():is_training())
    m:free()
    assert.error_matches(function() m(tensor.zeros(1, 2)) end, "freed dpy.Module")
  end)
end)

describe("models", function()
  it("cnn has DecentralizePy's 215,370 parameters and maps 1x28x28 to 10 classes", function()
    local cnn = registry.build("model", "cnn")
    assert.are.equal(215370, cnn:numel())
    assert.are.same({ 4, 10 }, shape(cnn, tensor.randn(4, 1, 28, 28)))
  end)

  it("lenet maps 3x32x32 and mlp flattens", function()
    assert.are.same({ 2, 10 }, shape(registry.build("model", "lenet"), tensor.randn(2, 3, 32, 32)))
    local mlp = registry.build("model", { "mlp", hidden = { 16 } })
    assert.are.equal(784 * 16 + 16 + 16 * 10 + 10, mlp:numel())
  end)

  it("initializes the same weights from the same seed", function()
    tensor.manual_seed(11)
    local a = registry.build("model", "cnn"):get_flat():totable()
    tensor.manual_seed(11)
    assert.are.same(a, registry.build("model", "cnn"):get_flat():totable())
  end)
end)

describe("losses", function()
  it("match hand-computed values", function()
    local logits = tensor.new { { 0.0, 0.0 } }
    local y = tensor.new { 1 }
    assert.is_true(math.abs(nn.cross_entropy(logits, y):item() - math.log(2)) < 1e-6)
    assert.is_true(math.abs(nn.nll(logits:log_softmax(1), y):item() - math.log(2)) < 1e-6)
    assert.are.equal(2.5, nn.mse(tensor.new { 1.0, 2.0 }, tensor.new { 2.0, 4.0 }):item())
    assert.are.equal(5, nn.mse(tensor.new { 1.0, 2.0 }, tensor.new { 2.0, 4.0 }, "sum"):item())
    local b = nn.bce_with_logits(tensor.new { 0.0 }, tensor.new { 1.0 }):item()
    assert.is_true(math.abs(b - math.log(2)) < 1e-6)
    assert.error_matches(function() nn.cross_entropy(logits, tensor.new { 5 }) end, "cross_entropy: .*out of bounds")
  end)
end)
