-- The Renyi-DP accountant against values computed independently, and DP-SGD's clipping.
local privacy = require "dpy.privacy"
local tensor = require "dpy.tensor"
local nn = require "dpy.nn"

-- The RDP of the sampled Gaussian mechanism by numerical integration of its definition
-- (Mironov, Talwar, Zhang 2019, eq. (3)): A_alpha = E_{z ~ N(0, s^2)} [((1-q) + q e^{(2z-1)/(2s^2)})^alpha],
-- RDP = log(A_alpha) / (alpha - 1). Composite Simpson's rule over [-20s, 20s + alpha], summed in log
-- space (rescaled to the largest term so far); independent of the accountant's series.
local function rdp_by_integration(q, s, alpha)
  local lo, hi, n = -20 * s, 20 * s + alpha, 10000
  local h, s2 = (hi - lo) / n, 2 * s * s
  local top, sum = -math.huge, 0
  for i = 0, n do
    local z = lo + i * h
    local v = -z * z / s2 + alpha * math.log((1 - q) + q * math.exp((2 * z - 1) / s2))
    local w = (i == 0 or i == n) and 1 or (i % 2 == 1 and 4 or 2)
    if v > top then sum, top = sum * math.exp(top - v), v end
    sum = sum + w * math.exp(v - top)
  end
  return (top + math.log(sum * h / 3 / (s * math.sqrt(2 * math.pi)))) / (alpha - 1)
end

-- Values computed independently with mpmath (40 digits): adaptive quadrature of the same definition.
local MPMATH = {
  { 0.01, 1.1, 1.5, 9.5545285718748299e-5 }, { 0.01, 1.0, 4.3, 3.9399628381127885e-4 },
  { 256 / 60000, 1.1, 1.1, 1.2779666371319914e-5 }, { 0.1, 2.0, 2.5, 0.0035940771994132283 },
  { 0.5, 0.8, 10.7, 7.5947696358452877 }, { 0.9, 1.0, 3.3, 1.5150830328098271 },
  { 1e-4, 0.5, 20.5, 31.317334480742987 }, { 0.02, 3.0, 100.5, 1.6327787162001232 },
  { 0.01, 1.0, 1.1, 9.2414710846869586e-5 }, { 0.01, 1.0, 10.9, 0.38761141130038889 },
  { 0.3, 0.4, 1.01, 0.56598056243408213 }, { 0.99, 0.1, 9.2, 459.98872401343257 },
  { 0.05, 0.1, 8.9, 441.62506110954041 }, { 0.0001, 0.8, 1.5, 2.8268517091805537e-8 },
  { 0.001, 5, 6.9, 1.4082568474754825e-7 }, { 0.7, 20, 6.2, 0.0038083076305788288 },
  { 0.0001, 0.3, 8.6, 37.355550514752099 }, { 0.99, 5, 1.7, 0.033332620580046766 },
}

-- |got - want| within rel of want, give or take 1e-16 (log A_alpha's rounding when A_alpha ~ 1)
local function close(got, want, rel, what)
  assert.is_true(math.abs(got - want) <= rel * math.abs(want) + 1e-16,
                 string.format("%s: %.12g, want %.12g", what, got, want))
end

describe("privacy.log_erfc", function()
  it("matches mpmath's log(erfc(x)) either side of the series/continued fraction switch, and far out", function()
    for _, c in ipairs {
      { 0, 0.0 }, { 0.1, -0.11930497373739561 }, { 0.5, -0.7350111298370844 }, { 1, -1.8496055099332482 },
      { 1.4999, -3.3841412183977523 }, { 1.5, -3.3844920895515527 }, { 1.5001, -3.3848429785581598 },
      { 2, -5.3649412646166376 }, { 5, -27.200889545537434 }, { 10, -102.87988902484489 },
      { 26, -679.83119976319423 }, { 30, -903.97411711064388 }, { 100, -10005.177585122664 },
      { 1e4, -100000009.78270532 }, { -0.5, 0.41903914777555958 }, { -1.5, 0.67605450273396056 },
      { -3, 0.69313613525044681 }, { -30, 0.69314718055994531 } } do
      local got = privacy.log_erfc(c[1])
      assert.is_true(math.abs(got - c[2]) <= 4e-15 * math.max(1, math.abs(c[2])),
                     string.format("x=%g: %.17g, want %.17g", c[1], got, c[2]))
    end
  end)
end)

describe("privacy.rdp_step", function()
  it("matches numerical integration of the definition, at integer and fractional orders", function()
    for _, c in ipairs { { 0.01, 1.1, 2 }, { 0.01, 1.1, 8 }, { 0.01, 1.1, 32 }, { 0.1, 2.0, 4 },
                         { 0.5, 4.0, 16 }, { 0.0085, 1.0, 12 }, { 0.01, 1.1, 1.5 }, { 0.01, 1.0, 4.3 },
                         { 256 / 60000, 1.1, 1.1 }, { 0.1, 2.0, 2.5 }, { 0.5, 4.0, 16.5 }, { 0.9, 1.0, 3.3 },
                         { 0.0085, 1.0, 12.7 }, { 0.02, 3.0, 40.5 } } do
      local q, s, a = c[1], c[2], c[3]
      close(privacy.rdp_step(q, s, a), rdp_by_integration(q, s, a), 1e-8,
            string.format("q=%g sigma=%g alpha=%g", q, s, a))
    end
  end)

  it("matches values computed independently with mpmath", function()
    for _, c in ipairs(MPMATH) do
      close(privacy.rdp_step(c[1], c[2], c[3]), c[4], 1e-9, string.format("q=%g sigma=%g alpha=%g", c[1], c[2], c[3]))
    end
  end)

  it("is positive at alpha = 1.5 (the binomial series truncated at k <= alpha is not)", function()
    assert.is_true(privacy.rdp_step(0.01, 1.1, 1.5) > 0)
  end)

  it("is continuous across an integer order: the two series and the closed form agree", function()
    for _, c in ipairs { { 0.01, 1.0, 4 }, { 0.2, 0.7, 2 }, { 0.05, 2.0, 30 } } do
      local q, s, a = c[1], c[2], c[3]
      local at = privacy.rdp_step(q, s, a)
      local below, above = privacy.rdp_step(q, s, a - 1e-9), privacy.rdp_step(q, s, a + 1e-9)
      assert.is_true(below <= at * (1 + 1e-9) and at <= above * (1 + 1e-9),
                     string.format("alpha=%g: %.15g %.15g %.15g", a, below, at, above))
      close(below, at, 1e-7, "below " .. a)
      close(above, at, 1e-7, "above " .. a)
    end
  end)

  it("grows with the order over the whole default grid", function()
    for _, c in ipairs { { 256 / 60000, 1.1 }, { 0.01, 1.0 }, { 0.1, 0.6 }, { 0.5, 3.0 }, { 1e-5, 0.8 } } do
      local prev = 0
      for _, a in ipairs(privacy.ORDERS) do
        local r = privacy.rdp_step(c[1], c[2], a)
        assert.is_true(r >= prev * (1 - 1e-12) and r < math.huge,
                       string.format("q=%g sigma=%g alpha=%g: %.15g after %.15g", c[1], c[2], a, r, prev))
        prev = r
      end
    end
  end)

  it("is the Gaussian mechanism's alpha / (2 sigma^2) without sampling, and 0 without data", function()
    assert.are.equal(8 / (2 * 1.5 ^ 2), privacy.rdp_step(1, 1.5, 8))
    assert.are.equal(2.5 / (2 * 1.5 ^ 2), privacy.rdp_step(1, 1.5, 2.5))
    assert.are.equal(0, privacy.rdp_step(0, 1.5, 8))
  end)

  it("refuses orders <= 1 and non-numbers", function()
    for _, a in ipairs { 1, 0.5, -2, 0 / 0, math.huge } do
      assert.has_error(function() privacy.rdp_step(0.01, 1, a) end,
                       string.format("privacy.rdp_step: the order must be a finite number > 1, got %s", tostring(a)))
    end
    assert.has_error(function() privacy.rdp_step(0.01, 1, "2") end,
                     "privacy.rdp_step: the order must be a finite number > 1, got 2 (a string)")
    assert.has_error(function() privacy.epsilon(0.01, 1, 10, 1e-5, { orders = { 2, 1 } }) end,
                     "privacy.epsilon: orders[2]: the order must be a finite number > 1, got 1")
    -- past 10^6: an integer order's sum has alpha terms (2^53 never ended; 1e300 failed in the loop)
    for _, a in ipairs { 1 << 53, 1e300, 2 ^ 63, 1000000.5 } do
      assert.has_error(function() privacy.rdp_step(0.01, 1, a) end,
                       string.format("privacy.rdp_step: the order must be at most 1e+06, got %s", tostring(a)))
    end
    assert.error_matches(function() privacy.epsilon(0.01, 1, 10, 1e-5, { orders = { 2, 1 << 40 } }) end,
                         "orders%[2%]: the order must be at most 1e%+06")
    assert.is_true(privacy.rdp_step(0.01, 1.1, 1000000) > 0)
  end)
end)

describe("privacy's default orders", function()
  it("are 1.1 ... 10.9 by 0.1, 11 ... 63, 128, 256, 512, 1024", function()
    local want = {}
    for x = 1, 99 do want[#want + 1] = 1 + x / 10 end
    for a = 11, 63 do want[#want + 1] = a end
    for _, a in ipairs { 128, 256, 512, 1024 } do want[#want + 1] = a end
    assert.are.same(want, privacy.ORDERS)
  end)
end)

describe("privacy.epsilon", function()
  -- eps of the issue's cases, checked with mpmath quadrature of the RDP at every default order
  it("reproduces the reference values, standard (Mironov 2017) and Balle et al. 2020", function()
    local eps, order = privacy.epsilon(256 / 60000, 1.1, 14063, 1e-5)
    close(eps, 3.00838104683, 1e-9, "MNIST 60 epochs, standard")
    assert.is_true(math.abs(order - 8.8) < 1e-12)
    eps, order = privacy.epsilon(256 / 60000, 1.1, 14063, 1e-5, { conversion = "balle2020" })
    close(eps, 2.59665552868, 1e-9, "MNIST 60 epochs, Balle 2020")
    assert.is_true(math.abs(order - 8.1) < 1e-12)
    eps, order = privacy.epsilon(0.01, 1.0, 10000, 1e-5, { conversion = "standard" })
    close(eps, 7.42872813053, 1e-9, "q 0.01, standard")
    assert.is_true(math.abs(order - 4.3) < 1e-12)
    eps, order = privacy.epsilon(0.01, 1.0, 10000, 1e-5, { conversion = "balle2020" })
    close(eps, 6.71273829755, 1e-9, "q 0.01, Balle 2020")
    assert.is_true(math.abs(order - 4.1) < 1e-12)
  end)

  it("at one fractional order, in both signatures", function()
    close(privacy.epsilon(0.01, 1.0, 10000, 1e-5, { orders = { 4.3 } }), 7.42872813053, 1e-9, "{ orders = { 4.3 } }")
    close(privacy.epsilon(0.01, 1.0, 10000, 1e-5, { 4.3 }), 7.42872813053, 1e-9, "{ 4.3 }")
    close(privacy.epsilon(0.01, 1.0, 10000, 1e-5, { orders = { 4.3 }, conversion = "balle2020" }),
          6.72203102397, 1e-9, "balle2020 at 4.3")
  end)

  it("converts RDP to (eps, delta) at the best order, growing with steps and shrinking with noise", function()
    -- one unsampled Gaussian step: eps = min_a a / (2 s^2) + log(1/delta) / (a - 1), by hand
    local best, orders = math.huge, {}
    for a = 2, 64 do
      best = math.min(best, a / 2 + math.log(1e5) / (a - 1))
      orders[#orders + 1] = a
    end
    assert.is_true(math.abs(privacy.epsilon(1, 1, 1, 1e-5, { orders = orders }) - best) < 1e-12)
    for _, conversion in ipairs { "standard", "balle2020" } do
      local o = { conversion = conversion }
      local e1 = privacy.epsilon(0.01, 1.0, 1000, 1e-5, o)
      assert.is_true(privacy.epsilon(0.01, 1.0, 2000, 1e-5, o) > e1)
      assert.is_true(privacy.epsilon(0.01, 2.0, 1000, 1e-5, o) < e1)
      assert.is_true(privacy.epsilon(0.01, 1.0, 1000, 1e-5, { conversion = "balle2020" })
                     < privacy.epsilon(0.01, 1.0, 1000, 1e-5))
      assert.are.equal(0, privacy.epsilon(0.01, 1.0, 0, 1e-5, o))
    end
    -- a loose delta: Balle's bound goes below 0 at the largest orders; (0, delta)-DP is what it proves
    assert.are.equal(0, privacy.epsilon(1, 1e4, 1, 0.5, { conversion = "balle2020" }))
  end)

  it("splits into privacy.rdp and privacy.spent", function()
    local orders = { 1.5, 4.3, 12 }
    local rdp = privacy.rdp(0.01, 1.0, 10000, orders)
    for i, a in ipairs(orders) do assert.are.equal(10000 * privacy.rdp_step(0.01, 1.0, a), rdp[i]) end
    local eps, order = privacy.spent(orders, rdp, 1e-5, "standard")
    assert.are.equal(4.3, order)
    assert.are.equal(privacy.epsilon(0.01, 1.0, 10000, 1e-5, { orders = orders }), eps)
  end)

  it("names bad arguments", function()
    assert.has_error(function() privacy.epsilon(1.5, 1, 1, 1e-5) end,
                     "privacy.epsilon: sampling rate q must be in [0, 1]")
    for _, sigma in ipairs { 0, -1, 0 / 0, math.huge } do
      assert.has_error(function() privacy.epsilon(0.01, sigma, 1, 1e-5) end,
                       "privacy.epsilon: the noise multiplier must be a finite number > 0")
    end
    -- terms past a double's range: 1e300 ran the series 10^7 terms (minutes, for each order), 1e-300 gave NaN
    for _, sigma in ipairs { 1e300, 1e-300, 1e-153 } do
      assert.has_error(function() privacy.rdp_step(0.3, sigma, 1.5) end,
                       string.format("privacy.rdp_step: the noise multiplier must be in [1e-100, 1e100] (the "
                                     .. "accountant's range), got %g", sigma))
    end
    for _, sigma in ipairs { 1e-100, 1e100 } do   -- its ends, at every order
      for _, r in ipairs(privacy.rdp(0.3, sigma, 1)) do assert.is_true(r >= 0 and r < math.huge, tostring(sigma)) end
    end
    assert.has_error(function() privacy.rdp(0.01, 1, 10, { 2, "3" }) end,
                     "privacy.rdp: orders[2]: the order must be a finite number > 1, got 3 (a string)")
    assert.has_error(function() privacy.epsilon(0.01, 1, -1, 1e-5) end,
                     "privacy.epsilon: steps must be a number >= 0")
    assert.has_error(function() privacy.epsilon(0.01, 1, 1, 1) end, "privacy.epsilon: delta must be in (0, 1)")
    assert.has_error(function() privacy.epsilon(0.01, 1, 1, 1e-5, { conversion = "tight" }) end,
                     "privacy.epsilon: conversion must be 'standard' or 'balle2020', got 'tight'")
    assert.has_error(function() privacy.epsilon(0.01, 1, 1, 1e-5, { order = { 2 } }) end,
                     "privacy.epsilon: unknown option 'order' (known: orders, conversion)")
    assert.has_error(function() privacy.epsilon(0.01, 1, 1, 1e-5, { orders = {} }) end,
                     "privacy.epsilon: orders must be a non-empty list")
    assert.has_error(function() privacy.spent({ 2, 3 }, { 1 }, 1e-5) end,
                     "privacy.spent: 2 orders but 1 RDP values")
    assert.has_error(function() privacy.spent({ 2, 3 }, { 1, 0 / 0 }, 1e-5) end,
                     "privacy.spent: rdp[2] must be a number >= 0, got " .. tostring(0 / 0))
    assert.has_error(function() privacy.spent({ 2 }, { 1 }, 1e-5, "Standard") end,
                     "privacy.spent: conversion must be 'standard' or 'balle2020', got 'Standard'")
    assert.has_error(function() privacy.rdp(0.01, 1, -2) end, "privacy.rdp: steps must be a number >= 0")
  end)
end)

describe("DP-SGD", function()
  it("clips every per-sample gradient to the bound and averages them", function()
    local g = tensor.new { { 3, 4 }, { 0.3, 0.4 }, { 0, 0 }, { -6, 8 } }   -- norms 5, 0.5, 0, 10
    local avg = privacy.privatize(g, 1.0, 0)
    local norms = g:norm(2, 1):totable()
    for i, n in ipairs(norms) do assert.is_true(n <= 1.0 + 1e-5, "row " .. i .. " norm " .. n) end
    assert.is_true(math.abs(norms[2] - 0.5) < 1e-6)   -- below the bound: unchanged
    local want = { (0.6 + 0.3 - 0.6) / 4, (0.8 + 0.4 + 0.8) / 4 }
    local got = avg:totable()
    for i = 1, 2 do assert.is_true(math.abs(got[i] - want[i]) < 1e-5) end
  end)

  it("adds noise of sigma * clip / n", function()
    local g = tensor.zeros(8, 20000)
    local avg = privacy.privatize(g, 2.0, 1.5)
    local std = avg:std():item()
    assert.is_true(math.abs(std - 1.5 * 2.0 / 8) < 0.01, "std " .. std)
  end)

  it("computes per-sample gradients in one call that average to the batch gradient", function()
    tensor.manual_seed(3)
    local m = nn.sequential { nn.linear(6, 5), nn.relu(), nn.linear(5, 3) }
    local x, y = tensor.randn(7, 6), tensor.new({ 0, 1, 2, 0, 1, 2, 0 }, "int64")
    local grads, losses = m:per_sample_grads(x, y)
    assert.are.same({ 7, m:numel() }, grads:size())
    assert.are.same({ 7 }, losses:size())
    m:zero_grad()
    local loss = nn.cross_entropy(m(x), y)
    loss:backward()
    assert.is_true(grads:mean(0):allclose(m:grad_flat(), 1e-5, 1e-6))
    assert.is_true(math.abs(losses:mean():item() - loss:item()) < 1e-5)
    -- the batched path (a sequential of linear layers) and per-sample passes agree
    local passes = m:per_sample_grads(x, y, "cross_entropy", false)
    assert.is_true(grads:allclose(passes, 1e-5, 1e-6))
    local target = tensor.randn(7, 3)
    assert.is_true(m:per_sample_grads(x, target, "mse"):allclose(m:per_sample_grads(x, target, "mse", false),
                                                                 1e-5, 1e-6))
    assert.has_error(function() m:per_sample_grads(x, tensor.new({ 0 }, "int64")) end,
                     "torch: per_sample_grads: 7 inputs but 1 targets")
  end)

  it("computes conv2d per-sample gradients in one batched pass, as per-sample passes do", function()
    -- every conv2d option the batched pass reads: padding, stride, dilation, groups, no bias;
    -- pooling, flatten and a non-square input between them
    tensor.manual_seed(5)
    local m = nn.sequential {
      nn.conv2d(2, 4, 3, { padding = 1 }), nn.relu(), nn.maxpool2d(2),
      -- a stride other than the dilation, and one that leaves rows of the padded input unread
      nn.conv2d(4, 6, 3, { stride = 3, dilation = 2, padding = 2, groups = 2 }), nn.tanh(),
      nn.conv2d(6, 3, 2, { bias = false }), nn.flatten(), nn.linear(3 * 1 * 2, 4),
    }
    local x, y = tensor.randn(5, 2, 12, 16), tensor.new({ 0, 3, 1, 2, 3 }, "int64")
    local grads, losses = m:per_sample_grads(x, y)
    local passes, passes_losses = m:per_sample_grads(x, y, "cross_entropy", false)
    assert.are.same({ 5, m:numel() }, grads:size())
    assert.is_true(grads:allclose(passes, 1e-5, 1e-6))
    assert.is_true(losses:allclose(passes_losses, 1e-5, 1e-6))
    m:zero_grad()
    local loss = nn.cross_entropy(m(x), y)
    loss:backward()
    assert.is_true(grads:mean(0):allclose(m:grad_flat(), 1e-5, 1e-6))
    -- clipped (some rows clipped, some not) and noised from the same generator: the same step
    local norms = passes:norm(2, 1)
    local clip = norms:median():item()
    local a = privacy.privatize(grads, clip, 1.3, tensor.generator(9))
    local b = privacy.privatize(passes, clip, 1.3, tensor.generator(9))
    assert.is_true(a:allclose(b, 1e-5, 1e-6))
    assert.is_true(grads:allclose(passes, 1e-5, 1e-6))
  end)

  it("gives DP-SGD's gradient in one call, as privatize over per-sample passes does", function()
    tensor.manual_seed(7)
    local m = nn.sequential {
      nn.conv2d(1, 3, 3, { padding = 1, stride = 2 }), nn.relu(), nn.flatten(),
      nn.linear(3 * 4 * 4, 6), nn.relu(), nn.linear(6, 3, { bias = false }),
    }
    local x, y = tensor.randn(6, 1, 8, 8), tensor.new({ 0, 1, 2, 2, 1, 0 }, "int64")
    local passes = m:per_sample_grads(x, y, "cross_entropy", false)
    local norms = passes:norm(2, 1)
    for _, c in ipairs { { norms:median():item(), 1.1 }, { norms:max():item() * 2, 0 }, { 1e-3, 0.5 } } do
      local clip, sigma = c[1], c[2]
      local want = privacy.privatize(passes:clone(), clip, sigma, tensor.generator(4))
      for _, batched in ipairs { true, false } do
        local got, losses = m:private_grad(x, y, clip, sigma, "cross_entropy", tensor.generator(4), batched)
        assert.are.same({ m:numel() }, got:size())
        assert.are.same({ 6 }, losses:size())
        assert.is_true(got:allclose(want, 1e-5, 1e-7), "clip " .. clip .. " sigma " .. sigma)
      end
    end
    -- without a generator: the state's default one, as privatize draws from it
    tensor.manual_seed(11)
    local want = privacy.privatize(passes:clone(), 0.5, 1.0)
    tensor.manual_seed(11)
    assert.is_true(m:private_grad(x, y, 0.5, 1.0):allclose(want, 1e-5, 1e-7))
    -- the same seed, the same step
    local a = m:private_grad(x, y, 0.5, 1.0, "cross_entropy", tensor.generator(3))
    assert.are.equal(a:bytes(), m:private_grad(x, y, 0.5, 1.0, "cross_entropy", tensor.generator(3)):bytes())
    assert.has_error(function() m:private_grad(x, y, 0, 1.0) end)
    assert.has_error(function() m:private_grad(x, y, 1.0, -1) end)
    assert.has_error(function() m:private_grad(x, tensor.new({ 0 }, "int64"), 1.0, 1.0) end,
                     "torch: private_grad: 6 inputs but 1 targets")
  end)

  it("gives the cnn's per-sample gradients in one batched pass, as per-sample passes do", function()
    tensor.manual_seed(6)
    local m = require("dpy.registry").build("model", "cnn", { classes = 10 })
    local x, y = tensor.randn(4, 1, 28, 28), tensor.new({ 0, 9, 4, 4 }, "int64")
    local grads, passes = m:per_sample_grads(x, y), m:per_sample_grads(x, y, "cross_entropy", false)
    assert.is_true(grads:allclose(passes, 1e-5, 1e-6))
    local a = privacy.privatize(grads, 1.0, 1.0, tensor.generator(2))
    assert.is_true(a:allclose(privacy.privatize(passes, 1.0, 1.0, tensor.generator(2)), 1e-5, 1e-6))
    assert.is_true(m:private_grad(x, y, 1.0, 1.0, "cross_entropy", tensor.generator(2)):allclose(a, 1e-5, 1e-6))
  end)
end)

describe("the differential_privacy action", function()
  it("steps the same in every process layout (DP-SGD's noise from each node's own generator)", function()
    local dp = "rounds = 1\nactions = { { 'differential_privacy', clip = 1.0, noise = 1.1 } }\n"
    local outs = run_layouts(TINY_RUN .. dp)
    for uid = 0, 3 do
      local a, b = node_metrics(outs[1], uid), node_metrics(outs[2], uid)
      assert.are.same(a.train_loss, b.train_loss)
      assert.are.same(a.test_accuracy, b.test_accuracy)
      assert.are.equal(read_file(string.format("%s/%d.model.pt", outs[1], uid)),
                       read_file(string.format("%s/%d.model.pt", outs[2], uid)))
    end
  end)

  it("records epsilon (standard) and epsilon_balle2020 every round, in both modes", function()
    for _, mode in ipairs { "sgd", "local" } do
      -- two nodes of 500 samples, evaluated once: seconds
      local cfg = TINY_RUN .. "nodes = 2\ntrain_samples = 1000\neval_every = 3\nactions = { { 'differential_privacy', "
                  .. "clip = 1.0, noise = 1.1, mode = '" .. mode .. "' } }\n"
      local code, _, err, out = run_config(cfg)
      if mode == "local" then   -- noise of std 1.1 on every weight each round: the cnn diverges, and the run says so
        assert.are.equal(1, code, err)
        assert.matches("every node diverged", err)
      else
        assert.are.equal(0, code, err)
      end
      local m = node_metrics(out, 1)
      assert.are.equal(3, #m.epsilon)
      assert.are.equal(3, #m.epsilon_balle2020)
      for r = 1, 3 do
        -- sgd: 3 steps a round, q = batch 16 / 500 samples a node; local: one unsampled Gaussian a round
        local q, steps = 16 / 500, 3 * r
        if mode == "local" then q, steps = 1, r end
        close(m.epsilon[r][2], privacy.epsilon(q, 1.1, steps, 1e-5), 1e-12, mode .. " epsilon")
        close(m.epsilon_balle2020[r][2], privacy.epsilon(q, 1.1, steps, 1e-5, { conversion = "balle2020" }), 1e-12,
              mode .. " epsilon_balle2020")
        assert.is_true(m.epsilon_balle2020[r][2] < m.epsilon[r][2])
      end
    end
  end)
end)
