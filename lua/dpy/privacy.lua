--- dpy.privacy: a Renyi-DP accountant for the sampled Gaussian mechanism (Mironov, Talwar and
-- Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian Mechanism", Section 3.3: the
-- closed form for integer orders), and DP-SGD's gradient privatization.
-- One step samples each record with probability q and adds N(0, (sigma * C)^2) noise to the sum
-- of per-sample gradients clipped to norm C. After T steps, RDP(alpha) = T * rdp_step(alpha), and
-- (eps, delta)-DP holds with eps = min_alpha RDP(alpha) + log(1 / delta) / (alpha - 1)
-- (Mironov 2017, Proposition 3). Integer orders only: eps is slightly above what fractional
-- orders would give (never below).
local tensor = require "dpy.tensor"

local M = {}

M.ORDERS = {}
for a = 2, 64 do M.ORDERS[#M.ORDERS + 1] = a end
for _, a in ipairs { 80, 96, 128, 192, 256, 512 } do M.ORDERS[#M.ORDERS + 1] = a end

local function log_add(a, b)
  if a == -math.huge then return b end
  if b == -math.huge then return a end
  local hi, lo = math.max(a, b), math.min(a, b)
  return hi + math.log(1 + math.exp(lo - hi))
end

--- The RDP of one step of the sampled Gaussian mechanism at integer order alpha >= 2.
function M.rdp_step(q, sigma, alpha)
  if q == 0 then return 0 end
  if q == 1 then return alpha / (2 * sigma * sigma) end
  -- log A_alpha = log sum_k C(alpha, k) (1-q)^(alpha-k) q^k exp((k^2 - k) / (2 sigma^2))
  local log_a, log_binom = -math.huge, 0
  for k = 0, alpha do
    if k > 0 then log_binom = log_binom + math.log((alpha - k + 1) / k) end
    local term = log_binom + k * math.log(q) + (alpha - k) * math.log(1 - q)
                 + (k * k - k) / (2 * sigma * sigma)
    log_a = log_add(log_a, term)
  end
  return log_a / (alpha - 1)
end

--- privacy.epsilon(q, sigma, steps, delta [, orders]) -> eps, the order that gave it
function M.epsilon(q, sigma, steps, delta, orders)
  if not (q >= 0 and q <= 1) then error("privacy.epsilon: sampling rate q must be in [0, 1]", 2) end
  if sigma <= 0 or sigma ~= sigma then error("privacy.epsilon: the noise multiplier must be > 0", 2) end
  if not (delta > 0 and delta < 1) then error("privacy.epsilon: delta must be in (0, 1)", 2) end
  if steps == 0 or q == 0 then return 0, nil end
  local best, best_order = math.huge, nil
  for _, a in ipairs(orders or M.ORDERS) do
    local eps = steps * M.rdp_step(q, sigma, a) + math.log(1 / delta) / (a - 1)
    if eps < best then best, best_order = eps, a end
  end
  return best, best_order
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
