--- dpy.byzantine: Byzantine-robust learning, step by step, in one process. n workers of which f
-- are Byzantine; the n - f honest ones each keep a model (the rows of an (n-f) x d matrix) and a
-- momentum, and train on their own data; an attack crafts the Byzantine vectors from the honest
-- ones; a robust aggregator (after pre-aggregations) combines what each worker receives.
--
--   local sim = byzantine.simulation { model = "cnn", train_set = data.fashion_mnist{},
--     partition = { "dirichlet", alpha = 1 }, test_set = ..., n = 10, f = 2,
--     attack = { "sign_flip", scale = 1.5 }, aggregator = { "median" }, pre_aggregation = { "nnm" } }
--   local snap = sim:step(); local list = sim:run(50); local e = sim:evaluate(test_set)
--
-- Decentralized (mode = "decentralized", the default), one round: every honest worker computes a
-- gradient on its own batch, updates its momentum m = beta m + g (+ weight decay) and its model
-- (local_parameters); the attack crafts f Byzantine models from the honest local models; each
-- honest worker then gathers n - f models — its own, and under byzantine_reach = "all" every
-- Byzantine model plus n - 2f - 1 other honest ones drawn uniformly, under "sampled" n - f - 1
-- drawn uniformly from the n - 1 others, honest or not (so 0 to f Byzantine ones) — and
-- replaces its model with their aggregate (mixed_parameters, as in the krum library's snapshot).
-- Server (mode = "server", a parameter server): one global model; the honest workers send their
-- momentum vectors computed at it, the attack crafts f more from them, the server aggregates all
-- n and steps: w = w - lr x aggregate.
local tensor = require "dpy.tensor"
local nn = require "dpy.nn"
local data = require "dpy.data"
local registry = require "dpy.registry"
local random = require "dpy.random"
local options = require "dpy.options"
local trainer = require "dpy.trainer"
local aggregators = require "dpy.aggregators"
local attacks = require "dpy.byzantine.attacks"

local M = { attacks = attacks }

local OPTIONS = { model = true, train_datasets = true, train_set = true, partition = true,
                  test_set = true, loss = true, n = true, f = true, batch_size = true,
                  learning_rate = true, momentum = true, weight_decay = true, attack = true,
                  aggregator = true, pre_aggregation = true, byzantine_reach = true, seed = true,
                  mode = true, snapshots = true, classes = true }

local Sim = {}
Sim.__index = Sim

local function entry_list(e)   -- one entry ("nnm", { "nnm", f = 2 }) or a list of entries
  if e == nil then return {} end
  if type(e) == "string" or type(e[1]) == "string" then return { e } end
  return e
end

local function build_model(spec, classes)
  if type(spec) == "function" then return spec() end
  if type(spec) == "userdata" then return spec end
  return registry.build("model", spec, { dataset = { classes = classes } })
end

--- byzantine.simulation(opts) -> sim (see the module's comment for the options)
function M.simulation(o)
  options.check(o, OPTIONS, "byzantine.simulation", 2)
  local n, f = o.n, o.f or 0
  if math.type(n) ~= "integer" or n < 1 then error("byzantine.simulation: n must be an integer >= 1", 2) end
  if math.type(f) ~= "integer" or f < 0 or f >= n then
    error("byzantine.simulation: f must be an integer in 0..n-1", 2)
  end
  local h = n - f
  local mode = o.mode or "decentralized"
  if mode ~= "decentralized" and mode ~= "server" then
    error("byzantine.simulation: mode must be 'decentralized' or 'server'", 2)
  end
  local reach = o.byzantine_reach or "sampled"
  if reach ~= "sampled" and reach ~= "all" then
    error("byzantine.simulation: byzantine_reach must be 'sampled' or 'all'", 2)
  end
  if mode == "decentralized" and reach == "all" and n - 2 * f - 1 < 0 then
    error(string.format("byzantine.simulation: byzantine_reach = 'all' needs n > 2f (n = %d, f = %d)", n, f), 2)
  end
  local seed = o.seed or 1
  local self = setmetatable({ n = n, f = f, h = h, mode = mode, reach = reach, seed = seed,
                              lr = o.learning_rate or 0.1, beta = o.momentum or 0,
                              wd = o.weight_decay or 0, t = 0, snapshots = o.snapshots ~= false,
                              loss = o.loss or "cross_entropy", rng = random.new(seed),
                              gen = tensor.generator(seed * 7919 + 1) }, Sim)
  self.loss_fn = nn[self.loss]
  if not self.loss_fn then error("byzantine.simulation: unknown loss '" .. tostring(o.loss) .. "'", 2) end
  self.attack = o.attack or "sign_flip"
  self.flips = (type(self.attack) == "table" and self.attack[1] or self.attack) == "label_flipping"
  self.aggregator = aggregators.with_f(o.aggregator or "mean", f)
  self.pre = {}
  for i, p in ipairs(entry_list(o.pre_aggregation)) do self.pre[i] = aggregators.with_f(p, f) end
  -- data: one loader per honest worker, each with its own shuffling stream
  local sets = o.train_datasets
  if not sets then
    if not o.train_set then error("byzantine.simulation: give train_datasets or train_set (+ partition)", 2) end
    local parts = registry.build("partitioner", o.partition or "iid",
                                 { labels = o.train_set.labels, nodes = h, seed = seed })
    sets = {}
    for i = 1, h do sets[i] = { dataset = o.train_set, indices = parts[i] } end
  end
  if #sets ~= h then
    error(string.format("byzantine.simulation: %d train_datasets for n - f = %d honest workers", #sets, h), 2)
  end
  self.loaders = {}
  for i, s in ipairs(sets) do
    if s.next then
      self.loaders[i] = s
    else
      local ds = s.dataset or s
      self.loaders[i] = data.loader(ds, { batch_size = o.batch_size or 32, indices = s.indices,
                                          generator = tensor.generator(seed * 1000003 + i) })
    end
  end
  local classes = o.classes or (o.train_set or (sets[1].dataset or sets[1])).classes or 10
  tensor.manual_seed(seed)
  self.model = build_model(o.model or "cnn", classes)
  self.classes = classes
  local w = self.model:get_flat()
  local d = w:numel()
  self.d = d
  if mode == "server" then
    self.global = w
    self.params = w:unsqueeze(0):expand(h, d):clone()
  else
    self.params = w:unsqueeze(0):expand(h, d):clone()
    w:free()
  end
  self.momentum = tensor.zeros(h, d)
  return self
end

-- One batch's gradient at the flat parameters p (worker i's data, labels flipped if asked).
function Sim:_gradient(i, p, flip)
  self.model:set_flat(p)
  local x, y = self.loaders[i]:next()
  if flip then
    local flipped = (y * -1):add_(self.classes - 1)
    y:free()
    y = flipped
  end
  self.model:zero_grad()
  local out <close> = self.model(x)
  local loss <close> = self.loss_fn(out, y)
  loss:backward()
  x:free()
  y:free()
  local g = self.model:grad_flat()
  if self.wd > 0 then g:add_(p, self.wd) end
  return g, loss:item()
end

-- Honest gradients and momentum at the given rows of parameters; returns grads (h x d), losses.
function Sim:_local_step(at)
  local grads, losses = tensor.empty(self.h, self.d), {}
  for i = 1, self.h do
    local p = at(i)
    local g, l = self:_gradient(i, p, false)
    grads[i - 1]:copy_(g)
    local m = self.momentum[i - 1]
    m:mul_(self.beta):add_(g)
    g:free()
    losses[i] = l
  end
  return grads, losses
end

-- The Byzantine vectors (f x d) crafted from honest (h x d).
function Sim:_byzantine(honest, at)
  if self.f == 0 then return tensor.zeros(0, self.d) end
  if not self.flips then return attacks.craft(self.attack, honest, self.n, self.f, self.gen) end
  -- label flipping: Byzantine worker j trains like honest worker j mod h, on flipped labels: its
  -- own momentum m = beta m + g of its flipped gradients, sent (server) or stepped along (p - lr m)
  local out = tensor.empty(self.f, self.d)
  self.flip_momentum = self.flip_momentum or tensor.zeros(self.f, self.d)
  for j = 1, self.f do
    local w = (j - 1) % self.h + 1
    local p = at(w)
    local g = self:_gradient(w, p, true)
    local m = self.flip_momentum[j - 1]
    m:mul_(self.beta):add_(g)
    g:free()
    if self.mode == "server" then out[j - 1]:copy_(m) else out[j - 1]:copy_(p - m * self.lr) end
  end
  return out
end

-- The rows worker i (1-based) receives — its own, then the others of its received set — and how
-- many of them are Byzantine.
function Sim:_received(i, local_params, byz)
  local chosen, count = { local_params[i - 1] }, self.f
  local others = {}   -- honest workers by index, Byzantine ones by h + j
  for j = 1, self.h do if j ~= i then others[#others + 1] = j end end
  local take = self.n - 2 * self.f - 1
  if self.reach == "all" then
    for j = 1, self.f do chosen[#chosen + 1] = byz[j - 1] end
  else
    for j = 1, self.f do others[#others + 1] = self.h + j end
    take, count = self.n - self.f - 1, 0
  end
  self.rng:shuffle(others)
  for t = 1, take do
    local j = others[t]
    if j > self.h then count = count + 1 end
    chosen[#chosen + 1] = j > self.h and byz[j - self.h - 1] or local_params[j - 1]
  end
  return chosen, count
end

local function snapshot(self, t)
  if not self.snapshots then
    for k, v in pairs(t) do
      if k ~= "losses" and tensor.is_tensor(v) then v:free(); t[k] = nil end
    end
  end
  t.step = self.t
  return t
end

--- sim:step() -> snapshot { step, parameters, momentum, honest_gradients, local_parameters,
-- byzantine_parameters (f x d; server: byzantine_gradients), mixed_parameters (the aggregates,
-- = parameters), byzantine_received (n - f counts), losses } (tensors are copies; with
-- snapshots = false only step and losses; the server has no mixed_parameters nor byzantine_received)
function Sim:step()
  self.t = self.t + 1
  if self.mode == "server" then
    local grads, losses = self:_local_step(function() return self.global end)
    local byz = self:_byzantine(self.momentum, function() return self.global end)
    local all = tensor.cat({ self.momentum, byz }, 0)
    local agg = aggregators.aggregate(self.aggregator, all, self.pre)
    all:free()
    self.global:add_(agg, -self.lr)
    agg:free()
    return snapshot(self, { parameters = self.global:clone(), momentum = self.momentum:clone(),
                            honest_gradients = grads, byzantine_gradients = byz,
                            losses = tensor.new(losses) })
  end
  local grads, losses = self:_local_step(function(i) return self.params[i - 1] end)
  local local_params = self.params - self.momentum * self.lr
  local byz = self:_byzantine(local_params, function(i) return self.params[i - 1] end)
  local received = {}
  for i = 1, self.h do
    local rows
    rows, received[i] = self:_received(i, local_params, byz)
    local agg = aggregators.aggregate(self.aggregator, rows, self.pre)
    self.params[i - 1]:copy_(agg)
    agg:free()
  end
  return snapshot(self, { parameters = self.params:clone(), mixed_parameters = self.params:clone(),
                          momentum = self.momentum:clone(), honest_gradients = grads,
                          local_parameters = local_params, byzantine_parameters = byz,
                          byzantine_received = tensor.new(received), losses = tensor.new(losses) })
end

--- sim:run(k) -> the list of k snapshots
function Sim:run(k)
  local out = {}
  for i = 1, k do out[i] = self:step() end
  return out
end

--- sim:evaluate(test_set [, {samples = N, batch_size = 100}]) -> { losses = {...},
-- accuracies = {...}, loss = mean, accuracy = mean } over the honest workers (server: its model)
function Sim:evaluate(test_set, opts)
  opts = opts or {}
  local indices = opts.samples and tensor.arange(math.min(opts.samples, data.size(test_set))) or nil
  local r = { losses = {}, accuracies = {} }
  local rows = self.mode == "server" and 1 or self.h
  for i = 1, rows do
    self.model:set_flat(self.mode == "server" and self.global or self.params[i - 1])
    local l, a = trainer.evaluate(self.model, test_set, { batch_size = opts.batch_size or 100,
                                                          indices = indices, loss = self.loss })
    r.losses[i], r.accuracies[i] = l, a
  end
  local sl, sa = 0, 0
  for i = 1, rows do sl, sa = sl + r.losses[i], sa + r.accuracies[i] end
  r.loss, r.accuracy = sl / rows, sa / rows
  return r
end

return M
