--- dpy.byzantine.attacks: Byzantine vectors computed from the honest ones. Each attack is
-- function(honest, n, f, opts, generator) -> f x d tensor, where honest is an h x d tensor of the
-- honest workers' vectors (models or gradients), n the workers in all and f the Byzantine ones.
-- label_flipping acts on data instead (the simulation and the label_flipping action).
local tensor = require "dpy.tensor"
local registry = require "dpy.registry"

local M = {}

--- The standard normal's quantile function (Acklam's rational approximation, relative error
-- below 1.2e-9).
function M.normal_quantile(p)
  if not (p > 0 and p < 1) then error("normal_quantile: p must be in (0, 1)", 2) end
  local a = { -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
              1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00 }
  local b = { -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
              6.680131188771972e+01, -1.328068155288572e+01 }
  local c = { -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
              -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00 }
  local d = { 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
              3.754408661907416e+00 }
  local function tail(q)
    return (((((c[1] * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) * q + c[6])
           / ((((d[1] * q + d[2]) * q + d[3]) * q + d[4]) * q + 1)
  end
  if p < 0.02425 then return tail(math.sqrt(-2 * math.log(p))) end
  if p > 1 - 0.02425 then return -tail(math.sqrt(-2 * math.log(1 - p))) end
  local q = p - 0.5
  local r = q * q
  return (((((a[1] * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * r + a[6]) * q
         / (((((b[1] * r + b[2]) * r + b[3]) * r + b[4]) * r + b[5]) * r + 1)
end

--- ALIE's z for n workers of which f are Byzantine (Baruch et al. 2019):
-- s = floor(n / 2 + 1) - f, z = Phi^-1((n - s) / n).
function M.alie_z(n, f)
  local s = math.floor(n / 2 + 1) - f
  return M.normal_quantile((n - s) / n)
end

local function rows(v, f)   -- f copies of the vector v
  return v:unsqueeze(0):expand(f, v:numel()):clone()
end

local function mean_of(honest) return honest:mean(0) end

M.ATTACKS = {
  sign_flip = {
    options = { scale = { type = "number", default = 1, doc = "the multiple of the mean, negated" } },
    doc = "-scale x the honest mean (scale 1)",
    craft = function(honest, _, f, o)
      local m <close> = mean_of(honest)
      return rows(m * -o.scale, f)
    end },
  alie = {
    options = { z = { type = "number", doc = "the number of standard deviations (from n and f)" } },
    doc = "a little is enough: mean - z x std per coordinate (z from n and f)",
    craft = function(honest, n, f, o)
      local z = o.z or M.alie_z(n, f)
      local m <close> = mean_of(honest)
      local s <close> = honest:size(0) > 1 and honest:std(0) or m * 0
      return rows(m - s * z, f)
    end },
  inner_product = {
    options = { epsilon = { type = "number", default = 0.1, doc = "the multiple of the mean, negated" } },
    doc = "inner product manipulation: -epsilon x the honest mean (0.1)",
    craft = function(honest, _, f, o)
      local m <close> = mean_of(honest)
      return rows(m * -o.epsilon, f)
    end },
  gaussian = {
    options = { sigma = { type = "number", min = 0, default = 1, doc = "standard deviation" },
                mu = { type = "number", default = 0, doc = "mean" } },
    doc = "N(mu, sigma^2) per coordinate (0, 1), drawn fresh",
    craft = function(honest, _, f, o, gen)
      local r = tensor.randn(f, honest:size(1), { generator = gen })
      return r:mul_(o.sigma):add_(o.mu)
    end },
  mimic = {
    options = { worker = { type = "integer", min = 0, default = 0, doc = "the honest worker copied" } },
    doc = "a copy of one honest worker's vector (worker 0)",
    craft = function(honest, _, f, o)
      local h = honest:size(0)   -- in a run, those of the node's neighbours: fewer than the nodes
      if o.worker >= h then
        error(string.format("mimic: worker %d is not one of the %d honest vectors (0..%d)", o.worker, h, h - 1), 0)
      end
      return rows(honest[o.worker], f)
    end },
  infinity = { options = {}, doc = "+inf in every coordinate",
    craft = function(honest, _, f) return tensor.full({ f, honest:size(1) }, math.huge) end },
  nan = { options = {}, doc = "NaN in every coordinate",
    craft = function(honest, _, f) return tensor.full({ f, honest:size(1) }, 0 / 0) end },
}

-- Each attack is a component of kind "attack": new(cfg) returns function(honest, n, f,
-- generator) -> f x d tensor; a user's attack file follows the same contract.
for name, a in pairs(M.ATTACKS) do
  registry.register {
    kind = "attack", name = name, options = a.options, doc = a.doc,
    new = function(o) return function(honest, n, f, gen) return a.craft(honest, n, f, o, gen) end end,
  }
end
registry.register {
  kind = "attack", name = "label_flipping", data = true,
  doc = "acts on data: Byzantine workers train on flipped labels (the simulation; the label_flipping action)",
  new = function()
    return function() error("label_flipping acts on data: it crafts no vectors", 2) end
  end,
}

--- attacks.craft(entry, honest, n, f [, generator]) -> f x d tensor; entry "sign_flip",
-- { "sign_flip", scale = 1.5 }, or the path of an attack file.
function M.craft(entry, honest, n, f, gen)
  local spec, err = registry.check("attack", entry)
  if not spec then error(err, 2) end
  if spec.data then error(string.format("attack '%s' acts on data: it crafts no vectors", spec.name), 2) end
  return registry.build("attack", entry)(honest, n, f, gen)
end

return M
