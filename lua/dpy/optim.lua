--- dpy.optim: optimizers (dpy.Optimizer over libtorch's SGD, Adam, AdamW) and learning-rate
-- schedules.
local core = require "dpy.optim.core"
local nn = require "dpy.nn"
local options = require "dpy.options"
local host = require "dpy.host.core"

local M = {}

local registry = require "dpy.registry"

local function betas(b)
  if #b ~= 2 then return "must be two numbers in [0, 1)" end
end

--- The options of each optimizer (dpy.options rules; libtorch's defaults).
M.OPTIONS = {
  sgd = { lr = { type = "number", above = 0, doc = "learning rate (0.01)" },
          momentum = { type = "number", min = 0, doc = "momentum factor (0)" },
          dampening = { type = "number", min = 0, doc = "dampening for momentum (0)" },
          weight_decay = { type = "number", min = 0, doc = "L2 penalty (0)" },
          nesterov = { type = "boolean", doc = "Nesterov momentum (false)" } },
  adam = { lr = { type = "number", above = 0, doc = "learning rate (1e-3)" },
           betas = { type = "list", of = "number", min = 0, below = 1, check = betas, doc = "{0.9, 0.999}" },
           eps = { type = "number", above = 0, doc = "1e-8" },
           weight_decay = { type = "number", min = 0, doc = "0; adamw 1e-2" },
           amsgrad = { type = "boolean", doc = "false" } },
}
M.OPTIONS.adamw = M.OPTIONS.adam

local function params_of(p)
  if nn.is_module(p) then return p end   -- core.new takes them, made the model's own where others read them
  if type(p) ~= "table" then error("a dpy.Module or a list of dpy.Tensor expected", 3) end
  return p
end

--- optim.sgd(module_or_params [, {lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0,
-- nesterov = false}]); optim.adam and optim.adamw take {lr = 1e-3, betas = {0.9, 0.999},
-- eps = 1e-8, weight_decay (0; adamw 1e-2), amsgrad = false}.
for kind, schema in pairs(M.OPTIONS) do
  M[kind] = function(params, opts)
    opts = opts or {}
    options.check(opts, schema, "optim." .. kind, 2)
    return core.new(kind, params_of(params), opts)
  end
  registry.register {
    kind = "optimizer", name = kind, options = schema, doc = "optim." .. kind,
    new = function(cfg, ctx) return M[kind](ctx.model, cfg) end,
  }
end

--- optim.save(opt, path) -> true | nil, err: the optimizer's state, written atomically
function M.save(opt, path) return host.write_atomic(path, opt:state()) end

--- optim.load(opt, path) -> true | nil, err
function M.load(opt, path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local bytes = f:read("a")
  f:close()
  local ok, msg = pcall(opt.set_state, opt, bytes)
  if not ok then return nil, path .. ": " .. tostring(msg) end
  return true
end

-- {==== schedules: s:step() once per epoch (or per round) sets the optimizer's lr ====}

local Schedule = {}
Schedule.__index = Schedule

function Schedule:step()
  self.t = self.t + 1
  self.opt:set_lr(self.rule(self.t))
  return self.opt:lr()
end

local function schedule(opt, rule)
  return setmetatable({ opt = opt, t = 0, rule = rule }, Schedule)
end

--- optim.step_lr(opt, {step_size, gamma = 0.1}): lr0 * gamma ^ floor(t / step_size)
function M.step_lr(opt, cfg)
  options.check(cfg, { step_size = true, gamma = true }, "optim.step_lr", 2)
  local lr0, gamma = opt:lr(), cfg.gamma or 0.1
  options.check_type(cfg.step_size, "integer", "step_size", 2)
  return schedule(opt, function(t) return lr0 * gamma ^ (t // cfg.step_size) end)
end

--- optim.exponential_lr(opt, {gamma}): lr0 * gamma ^ t
function M.exponential_lr(opt, cfg)
  options.check(cfg, { gamma = true }, "optim.exponential_lr", 2)
  local lr0 = opt:lr()
  options.check_type(cfg.gamma, "number", "gamma", 2)
  return schedule(opt, function(t) return lr0 * cfg.gamma ^ t end)
end

--- optim.cosine_lr(opt, {t_max, eta_min = 0}): cosine annealing from lr0 to eta_min over t_max steps,
-- then held at eta_min (PyTorch's CosineAnnealingLR rises again: a run seldom wants that)
function M.cosine_lr(opt, cfg)
  options.check(cfg, { t_max = true, eta_min = true }, "optim.cosine_lr", 2)
  local lr0, eta = opt:lr(), cfg.eta_min or 0
  options.check_type(cfg.t_max, "integer", "t_max", 2)
  return schedule(opt, function(t)
    return eta + (lr0 - eta) * (1 + math.cos(math.pi * math.min(t, cfg.t_max) / cfg.t_max)) / 2
  end)
end

return M
