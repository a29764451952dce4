-- The Renyi-DP accountant against values computed independently, and DP-SGD's clipping.
local privacy = require "dpy.privacy"
local tensor = require "dpy.tensor"
local nn = require "dpy.nn"

-- The RDP of the sampled Gaussian mechanism by numerical integration of its definition
-- (Mironov, Talwar, Zhang 2019, eq. (3)): A_alpha = E_{z ~ N(0, s^2)} [((1-q) + q e^{(2z-1)/(2s^2)})^alpha],
-- RDP = log(A_alpha) / (alpha - 1). Composite Simpson's rule over [-20s, 20s + alpha], in log
-- space; independent of the accountant's binomial expansion.
local function rdp_by_integration(q, s, alpha)
  local lo, hi, n = -20 * s, 20 * s + alpha, 40000
  local h = (hi - lo) / n
  local terms, top = {}, -math.huge
  for i = 0, n do
    local z = lo + i * h
    local log_ratio = math.log((1 - q) + q * math.exp((2 * z - 1) / (2 * s * s)))
    local log_pdf = -z * z / (2 * s * s) - math.log(s * math.sqrt(2 * math.pi))
    local w = (i == 0 or i == n) and 1 or (i % 2 == 1 and 4 or 2)
    terms[i] = { math.log(w), log_pdf + alpha * log_ratio }
    top = math.max(top, terms[i][2])
  end
  local sum = 0
  for i = 0, n do sum = sum + math.exp(terms[i][1] + terms[i][2] - top) end
  return (top + math.log(sum * h / 3)) / (alpha - 1)
end

describe("privacy.rdp_step", function()
  it("matches numerical integration of the definition", function()
    for _, c in ipairs { { 0.01, 1.1, 2 }, { 0.01, 1.1, 8 }, { 0.01, 1.1, 32 }, { 0.1, 2.0, 4 },
                         { 0.5, 4.0, 16 }, { 0.0085, 1.0, 12 } } do
      local q, s, a = c[1], c[2], c[3]
      local want = rdp_by_integration(q, s, a)
      local got = privacy.rdp_step(q, s, a)
      assert.is_true(math.abs(got - want) <= 1e-6 * math.abs(want) + 1e-12,
                     string.format("q=%g sigma=%g alpha=%d: %.10g vs %.10g", q, s, a, got, want))
    end
  end)

  it("is the Gaussian mechanism's alpha / (2 sigma^2) without sampling, and 0 without data", function()
    assert.are.equal(8 / (2 * 1.5 ^ 2), privacy.rdp_step(1, 1.5, 8))
    assert.are.equal(0, privacy.rdp_step(0, 1.5, 8))
  end)
end)

describe("privacy.epsilon", function()
  it("converts RDP to (eps, delta) at the best order, growing with steps and shrinking with noise", function()
    -- one unsampled Gaussian step: eps = min_a a / (2 s^2) + log(1/delta) / (a - 1), by hand
    local best = math.huge
    for a = 2, 64 do best = math.min(best, a / 2 + math.log(1e5) / (a - 1)) end
    assert.is_true(math.abs(privacy.epsilon(1, 1, 1, 1e-5, (function()
      local o = {}
      for a = 2, 64 do o[#o + 1] = a end
      return o
    end)()) - best) < 1e-12)
    local e1 = privacy.epsilon(0.01, 1.0, 1000, 1e-5)
    assert.is_true(privacy.epsilon(0.01, 1.0, 2000, 1e-5) > e1)
    assert.is_true(privacy.epsilon(0.01, 2.0, 1000, 1e-5) < e1)
    assert.are.equal(0, privacy.epsilon(0.01, 1.0, 0, 1e-5))
    assert.has_error(function() privacy.epsilon(1.5, 1, 1, 1e-5) end,
                     "privacy.epsilon: sampling rate q must be in [0, 1]")
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
end)
