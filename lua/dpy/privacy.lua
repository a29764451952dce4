--- dpy.privacy: a Renyi-DP accountant for the sampled Gaussian mechanism, and DP-SGD's gradient
-- privatization.
-- One step samples each record with probability q and adds N(0, (sigma * C)^2) noise to the sum
-- of per-sample gradients clipped to norm C. Its RDP at order alpha > 1 is log(A_alpha) / (alpha - 1)
-- with A_alpha = E_{z ~ N(0, s^2)} [((1 - q) + q e^{(2z - 1) / (2 s^2)})^alpha] (Mironov, Talwar and
-- Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian Mechanism", Section 3.3): a
-- finite binomial sum at integer orders, two infinite series with erfc factors at fractional ones.
-- After T steps RDP is T times that, and (eps, delta)-DP holds with eps the minimum over the orders
-- of the "standard" conversion RDP + log(1 / delta) / (alpha - 1) (Mironov 2017, Proposition 3)
-- or the tighter "balle2020" one, RDP + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1)
-- (Balle et al. 2020, "Hypothesis testing interpretations and Renyi differential privacy", Thm 21).
local tensor = require "dpy.tensor"

local M = {}

-- Opacus's DEFAULT_ALPHAS with 11 filled in, and large orders for small eps (many steps of much noise)
M.ORDERS = {}
for x = 1, 99 do M.ORDERS[#M.ORDERS + 1] = 1 + x / 10 end
for a = 11, 63 do M.ORDERS[#M.ORDERS + 1] = a end
for _, a in ipairs { 128, 256, 512, 1024 } do M.ORDERS[#M.ORDERS + 1] = a end

local huge, log, exp, abs = math.huge, math.log, math.exp, math.abs
local LOG_HALF, LOG2, SQRT2, LOG_SQRT_PI = log(0.5), log(2), math.sqrt(2), 0.5 * log(math.pi)

-- log(1 + x) and exp(x) - 1 without cancellation for small x (Goldberg 1991; Kahan)
local function log1p(x)
  local u = 1 + x
  if u == 1 then return x end
  return log(u) * x / (u - 1)
end

local function expm1(x)
  local u = exp(x)
  if u == 1 then return x end
  if u - 1 == -1 then return -1 end
  if u == huge then return huge end
  return (u - 1) * x / log(u)
end

local function log_add(a, b)
  if a == -huge then return b end
  if b == -huge then return a end
  local hi, lo = math.max(a, b), math.min(a, b)
  return hi + log1p(exp(lo - hi))
end

-- log(e^a - e^b); the series' partial sums are positive, so a < b means precision ran out
local function log_sub(a, b, what)
  if b == -huge then return a end
  if a <= b then
    if a == b then return -huge end
    error(string.format("privacy: %s: the series lost precision (a partial sum went below 0)", what), 3)
  end
  -- a + log(1 - e^-d), each side of log 2 in the form that keeps its digits (Maechler 2012)
  local d = a - b
  if d <= LOG2 then return a + log(-expm1(-d)) end
  return a + log1p(-exp(-d))
end

-- erfc(x) for x >= 0: 1 - erf(x) by erf's Taylor series below 1.5, above it exp(-x^2) / sqrt(pi) times
-- Laplace's continued fraction 1 / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))) by Lentz's method
-- (at most ~1e-15 relative error either side: below 1.5 the series' cancellation is small, above
-- it the fraction converges in < 100 terms). Returned as log erfc(x), which is finite far past
-- erfc's underflow (x > 26.5).
local function log_erfc_positive(x)
  if x < 1.5 then
    local x2, sum, term, n = x * x, x, x, 0
    repeat
      n = n + 1
      term = -term * x2 / n
      local add = term / (2 * n + 1)
      sum = sum + add
    until abs(add) <= 1e-17 * abs(sum)
    return log1p(-2 / math.sqrt(math.pi) * sum)
  end
  local f, c, d, n = x, x, 0, 0
  repeat
    n = n + 1
    d = 1 / (x + n / 2 * d)
    c = x + n / 2 / c
    local delta = c * d
    f = f * delta
  until abs(delta - 1) < 1e-16 or n == 1000
  return -x * x - LOG_SQRT_PI - log(f)
end

--- privacy.log_erfc(x) -> log(erfc(x)), accurate to ~1e-15 for every x (erfc(x) itself underflows
-- for x > 26.5)
function M.log_erfc(x)
  if x >= 0 then return log_erfc_positive(x) end
  return log(2 - exp(log_erfc_positive(-x)))
end

-- log A_alpha at integer alpha: sum_k C(alpha, k) (1-q)^(alpha-k) q^k exp((k^2 - k) / (2 sigma^2))
local function log_a_int(q, sigma, alpha)
  local log_q, log_1q, s2 = log(q), log1p(-q), 2 * sigma * sigma
  local log_a, log_binom = -huge, 0
  for k = 0, alpha do
    if k > 0 then log_binom = log_binom + log((alpha - k + 1) / k) end
    log_a = log_add(log_a, log_binom + k * log_q + (alpha - k) * log_1q + (k * k - k) / s2)
  end
  return log_a
end

-- log A_alpha at any alpha: the integral split at z0, where q e^{(2z-1)/(2 sigma^2)} = 1 - q; below it
-- the binomial series of ((1-q) + q e^{...})^alpha in powers of q e^{...}, above it in powers of (1-q),
-- each term integrated in closed form against the Gaussian (the erfc factors). At an integer order the
-- coefficients vanish past alpha and this is the finite sum.
local function log_a_frac(q, sigma, alpha)
  local log_q, log_1q, s2 = log(q), log1p(-q), 2 * sigma * sigma
  local z0 = sigma * sigma * (log_1q - log_q) + 0.5
  local scale = SQRT2 * sigma
  local a0, a1 = -huge, -huge
  local log_coef, positive = 0, true   -- log |C(alpha, i)| and its sign
  local what = string.format("alpha %.17g, q %.17g, sigma %.17g", alpha, q, sigma)
  for i = 0, 10000000 do
    if i > 0 then
      local f = (alpha - i + 1) / i
      if f < 0 then positive = not positive end
      log_coef = log_coef + log(abs(f))
    end
    local j = alpha - i
    local s0 = log_coef + i * log_q + j * log_1q + (i * i - i) / s2 + LOG_HALF + M.log_erfc((i - z0) / scale)
    local s1 = log_coef + j * log_q + i * log_1q + (j * j - j) / s2 + LOG_HALF + M.log_erfc((z0 - j) / scale)
    if positive then
      a0, a1 = log_add(a0, s0), log_add(a1, s1)
    else
      a0, a1 = log_sub(a0, s0, what), log_sub(a1, s1, what)
    end
    -- stop once the terms are below e^-25 of log A (an absolute e^-30, as in Opacus, is 1e-8 of the
    -- RDP near alpha = 1), or below e^-60. Past alpha + 1 the terms alternate and shrink slowly: the
    -- tail then sums to about minus half the last one (the first step of Euler's transform).
    local log_a = log_add(a0, a1)
    local stop = log_a > 0 and math.max(log_a + log(log_a) - 25, -60) or -60
    if math.max(s0, s1) < stop then
      if i > alpha + 1 then
        if positive then
          a0, a1 = log_sub(a0, s0 + LOG_HALF, what), log_sub(a1, s1 + LOG_HALF, what)
        else
          a0, a1 = log_add(a0, s0 + LOG_HALF), log_add(a1, s1 + LOG_HALF)
        end
      end
      return log_add(a0, a1)
    end
  end
  error(string.format("privacy: %s: the series did not converge in 10^7 terms", what), 3)
end

-- The largest order: an integer order's binomial sum has alpha terms (2^31 took minutes, 2^53 never
-- ended, 1e300 failed inside the loop); the default orders stop at 1024.
local MAX_ORDER = 1e6

local function check_order(a, fn, where)
  if math.type(a) == nil or not (a > 1 and a < huge) then
    error(string.format("privacy.%s: %sthe order must be a finite number > 1, got %s%s", fn, where or "",
                        tostring(a), type(a) == "number" and "" or " (a " .. type(a) .. ")"), 3)
  end
  if a > MAX_ORDER then
    error(string.format("privacy.%s: %sthe order must be at most %g, got %s", fn, where or "", MAX_ORDER,
                        tostring(a)), 3)
  end
end

local function check_mechanism(fn, q, sigma)
  if type(q) ~= "number" or not (q >= 0 and q <= 1) then
    error(string.format("privacy.%s: sampling rate q must be in [0, 1]", fn), 3)
  end
  if type(sigma) ~= "number" or sigma ~= sigma or sigma <= 0 or sigma == huge then
    error(string.format("privacy.%s: the noise multiplier must be a finite number > 0", fn), 3)
  end
  -- past these the series' terms (k^2 / 2 sigma^2) leave a double's range: 1e300 ran 10^7 terms (minutes an
  -- order), 1e-153 gave NaN, 1e-300 NaN at once
  if sigma < 1e-100 or sigma > 1e100 then
    error(string.format("privacy.%s: the noise multiplier must be in [1e-100, 1e100] (the accountant's range), "
                        .. "got %g", fn, sigma), 3)
  end
end

-- A_alpha >= 1; computed, log A_alpha can be a rounding error below 0 (~1e-16) when q is tiny
local function rdp_step(q, sigma, alpha)
  if q == 0 then return 0 end
  if q == 1 then return alpha / (2 * sigma * sigma) end
  local log_a = alpha % 1 == 0 and log_a_int(q, sigma, math.tointeger(alpha)) or log_a_frac(q, sigma, alpha)
  return math.max(log_a, 0) / (alpha - 1)
end

--- privacy.rdp_step(q, sigma, alpha) -> the RDP of one step of the sampled Gaussian mechanism at
-- order alpha > 1 (any real)
function M.rdp_step(q, sigma, alpha)
  check_mechanism("rdp_step", q, sigma)
  check_order(alpha, "rdp_step")
  return rdp_step(q, sigma, alpha)
end

local function check_orders(fn, orders)
  if type(orders) ~= "table" or orders[1] == nil then
    error(string.format("privacy.%s: orders must be a non-empty list", fn), 3)
  end
  for i, a in ipairs(orders) do check_order(a, fn, string.format("orders[%d]: ", i)) end
end

local function check_steps(fn, steps)
  if type(steps) ~= "number" or not (steps >= 0 and steps < huge) then
    error(string.format("privacy.%s: steps must be a number >= 0", fn), 3)
  end
end

local function check_delta(fn, delta)
  if type(delta) ~= "number" or not (delta > 0 and delta < 1) then
    error(string.format("privacy.%s: delta must be in (0, 1)", fn), 3)
  end
end

local CONVERSIONS = {
  standard = function(r, a, delta) return r + log(1 / delta) / (a - 1) end,
  balle2020 = function(r, a, delta) return r + log1p(-1 / a) - (log(delta) + log(a)) / (a - 1) end,
}

local function check_conversion(fn, conversion)
  if conversion ~= nil and not CONVERSIONS[conversion] then
    error(string.format("privacy.%s: conversion must be 'standard' or 'balle2020', got '%s'", fn,
                        tostring(conversion)), 3)
  end
end

local function rdp(q, sigma, steps, orders)
  local out = {}
  for i, a in ipairs(orders) do out[i] = steps * rdp_step(q, sigma, a) end
  return out
end

local function spent(orders, rdps, delta, conversion)
  local convert = CONVERSIONS[conversion or "standard"]
  local best, best_order = huge, nil
  for i, a in ipairs(orders) do
    local eps = convert(rdps[i], a, delta)
    if eps < best then best, best_order = eps, a end
  end
  -- (eps, delta)-DP implies (eps', delta)-DP for every eps' > eps: a bound below 0 proves (0, delta)
  return math.max(best, 0), best_order
end

--- privacy.rdp(q, sigma, steps, [orders]) -> steps * RDP(alpha) at each order (a list; default M.ORDERS)
function M.rdp(q, sigma, steps, orders)
  check_mechanism("rdp", q, sigma)
  check_steps("rdp", steps)
  orders = orders or M.ORDERS
  check_orders("rdp", orders)
  return rdp(q, sigma, steps, orders)
end

--- privacy.spent(orders, rdp, delta, [conversion = "standard"]) -> eps, the order that gave it: the
-- (eps, delta) that the RDP values rdp[i] at orders[i] (e.g. from privacy.rdp) imply
function M.spent(orders, rdps, delta, conversion)
  check_orders("spent", orders)
  if type(rdps) ~= "table" or #rdps ~= #orders then
    error(string.format("privacy.spent: %d orders but %s RDP values", #orders,
                        type(rdps) == "table" and tostring(#rdps) or "no list of"), 2)
  end
  for i = 1, #orders do
    if math.type(rdps[i]) == nil or rdps[i] ~= rdps[i] or rdps[i] < 0 then
      error(string.format("privacy.spent: rdp[%d] must be a number >= 0, got %s", i, tostring(rdps[i])), 2)
    end
  end
  check_delta("spent", delta)
  check_conversion("spent", conversion)
  return spent(orders, rdps, delta, conversion)
end

local OPTIONS = { orders = true, conversion = true }

--- privacy.epsilon(q, sigma, steps, delta, [opts]) -> eps, the order that gave it, after steps steps;
-- opts = { orders = M.ORDERS, conversion = "standard" | "balle2020" }, or a plain list of orders
function M.epsilon(q, sigma, steps, delta, opts)
  check_mechanism("epsilon", q, sigma)
  check_steps("epsilon", steps)
  check_delta("epsilon", delta)
  opts = opts or {}
  if type(opts) ~= "table" then error("privacy.epsilon: opts must be a table", 2) end
  local orders, conversion = opts.orders, opts.conversion
  if opts[1] ~= nil then
    orders, conversion = opts, nil   -- the former signature: a list of orders
  else
    for k in pairs(opts) do
      if not OPTIONS[k] then
        error(string.format("privacy.epsilon: unknown option '%s' (known: orders, conversion)", tostring(k)), 2)
      end
    end
  end
  orders = orders or M.ORDERS
  check_orders("epsilon", orders)
  check_conversion("epsilon", conversion)
  if steps == 0 or q == 0 then return 0, nil end
  return spent(orders, rdp(q, sigma, steps, orders), delta, conversion)
end

--- privacy.privatize(grads, clip, sigma [, generator]) -> the DP-SGD gradient: every row of grads
-- (n x d per-sample gradients) clipped to L2 norm clip, summed, N(0, (sigma * clip)^2) noise added,
-- divided by n. grads is clipped in place.
function M.privatize(grads, clip, sigma, generator)
  local n = grads:size(0)
  local norms <close> = grads:norm(2, 1)
  local scale <close> = (clip / (norms + 1e-6)):clamp(nil, 1.0)
  local column <close> = scale:unsqueeze(1)
  grads:mul_(column)
  local sum = grads:sum(0)
  if sigma > 0 then
    local noise <close> = tensor.randn(sum:numel(), { generator = generator })
    sum:add_(noise, sigma * clip)
  end
  sum:div_(n)
  return sum
end

return M
