--- dpy.trainer: local training steps and evaluation. Tensors of each step are freed at once
-- (the GC cannot see their memory); nothing is done per sample in Lua.
local nn = require "dpy.nn"
local data = require "dpy.data"
local tensor = require "dpy.tensor"

local M = {}
local Trainer = {}
Trainer.__index = Trainer

--- A binary task: labels in `positive` (class ids) become 1, the others 0; the model has one
-- output (a logit) and the loss is bce_with_logits. Returns { targets = fn(y) -> float tensor,
-- outputs = fn(out) -> 1-d logits }.
function M.binary(positive, classes)
  local map = tensor.zeros(classes)
  for _, c in ipairs(positive) do
    local k = math.tointeger(c)   -- 1.0 is class 1, as the config check takes it
    if not k or k < 0 or k >= classes then
      error(string.format("binary task: class %s is not in 0..%d", tostring(c), classes - 1), 2)
    end
    map[k] = 1
  end
  return {
    targets = function(y) return map:index_select(0, y) end,
    outputs = function(out) return out:reshape(-1) end,
  }
end

-- Losses that compare the outputs with a vector per sample: on class labels, the label's one-hot
-- row (the usual reading of MSE or one-vs-rest BCE for classification).
local ONE_HOT = { mse = true, bce_with_logits = true }

--- trainer.targets(loss, out, y, first) -> the loss's targets for class labels y and the model's
-- outputs out (a new tensor, or y itself). nll takes log-probabilities: outputs that are not
-- (logits) would train towards -inf; a first batch is checked.
local function targets(loss, out, y, first)
  if first and loss == "nll" then
    local p <close> = out:detach():exp():sum(1)
    local off <close> = p:sub(1):abs():max()
    if off:item() > 1e-3 then
      error("loss 'nll' takes log-probabilities (a model ending in log_softmax); this model's outputs are not "
            .. "(the built-in models give logits: use cross_entropy)", 0)
    end
  end
  if not ONE_HOT[loss] then return y end
  local eye <close> = tensor.eye(out:size(1), { dtype = out:dtype(), device = out:device() })
  return eye:index_select(0, y)
end

M.targets = targets

--- trainer.new{model, optimizer, loader, loss = "cross_entropy", task = nil | trainer.binary(...)}
-- mse and bce_with_logits compare the outputs with the labels' one-hot rows; nll needs a model
-- whose outputs are log-probabilities (checked on the first batch).
function M.new(t)
  local name = t.task and "bce_with_logits" or t.loss or "cross_entropy"
  if not nn[name] then error("trainer: unknown loss " .. tostring(t.loss), 2) end
  return setmetatable({ model = t.model, opt = t.optimizer, loader = t.loader, loss_fn = nn[name],
                        loss = not t.task and name or nil, task = t.task, steps = 0, samples = 0 }, Trainer)
end

--- t:backward() -> loss of the next batch (a number), batch size, and whether it ended an epoch;
-- its gradients are added to the parameters' (ps's workers sum those of several batches)
function Trainer:backward()
  local xb, yb, last = self.loader:next()
  local x <close> = xb
  local raw <close> = self.model(x)
  local out = self.task and self.task.outputs(raw) or raw
  local y <close> = self.task and self.task.targets(yb) or targets(self.loss, out, yb, self.steps == 0)
  local loss <close> = self.loss_fn(out, y)
  loss:backward()
  local n = y:size(0)
  if y ~= yb then yb:free() end
  self.steps, self.samples = self.steps + 1, self.samples + n
  return loss:item(), n, last
end

--- t:step() -> loss of one batch (a number), batch size, and whether it ended an epoch
function Trainer:step()
  self.model:own_flat()   -- the step writes the parameters in place: never those others still read
  self.opt:zero_grad()
  local loss, n, last = self:backward()
  self.opt:step()
  return loss, n, last
end

--- t:run(k) -> mean loss over k steps; the gradients are dropped after the last
function Trainer:run(k)
  local sum = 0
  for _ = 1, k do sum = sum + self:step() end
  self.opt:zero_grad()
  return sum / k
end

-- The first index of indices when they are a range first, first + 1, ... (test_samples: the
-- first N); else nil.
local function range_start(indices)
  local first = indices[0]:item()
  local range <close> = tensor.arange(first, first + indices:numel())
  local same <close> = range:eq(indices):all()
  return same:item() and first or nil
end

-- The evaluation's batches: narrow views of the process's decoded copy of ds (data.decoded; up
-- to the last index asked for) when it has one and the indices are a range, its rows gathered for
-- other indices; else a loader's. Each batch is x, labels, both to be freed.
local function eval_batches(ds, indices, bs)
  local n = indices and indices:numel() or data.size(ds)
  if n == 0 then error("trainer.evaluate: no samples (empty indices)", 3) end
  local first = 0
  if indices then first = range_start(indices) end
  local x_all, y_all
  if not first then
    x_all, y_all = data.decoded(ds)
  elseif first >= 0 and first + n <= data.size(ds) then
    x_all, y_all = data.decoded(ds, first + n)
  end
  if not x_all then
    return data.loader(ds, { batch_size = bs, indices = indices, shuffle = false }):epoch(), function() end
  end
  local pos = 0
  local function next_batch()
    if pos >= n then return nil end
    local len = math.min(bs, n - pos)
    local x, y
    if first then
      x, y = x_all:narrow(0, first + pos, len), y_all:narrow(0, first + pos, len)
    else
      local idx <close> = indices:narrow(0, pos, len)
      x, y = x_all:index_select(0, idx), y_all:index_select(0, idx)
    end
    pos = pos + len
    return x, y
  end
  return next_batch, function() x_all:free(); y_all:free() end
end

--- trainer.evaluate(model, dataset [, {batch_size = 100, indices, loss, task}]) -> mean loss, accuracy
-- (the loss's mean as training takes it: over samples, or over their one-hot entries)
function M.evaluate(model, ds, opts)
  opts = opts or {}
  local task = opts.task
  local name = not task and (opts.loss or "cross_entropy") or nil
  local loss_fn = nn[name or "bce_with_logits"]
  local was_training = model:is_training()
  model:eval()
  local batches, done = eval_batches(ds, opts.indices, opts.batch_size or 100)
  local total, correct, n, terms = 0, 0, 0, 0
  tensor.no_grad(function()
    for x, labels in batches do
      local y = task and task.targets(labels) or labels
      local raw <close> = model(x)
      local out = task and task.outputs(raw) or raw
      local t <close> = task and y or targets(name, out, y, n == 0)
      local l <close> = loss_fn(out, t, "sum")
      local pred <close> = task and out:gt(0):to("float32") or out:argmax(1)
      local hits <close> = pred:eq(y):sum()
      total, correct, n, terms = total + l:item(), correct + hits:item(), n + y:size(0), terms + t:numel()
      x:free()
      y:free()
      labels:free()
    end
  end)
  done()
  model:train(was_training)
  return total / terms, correct / n
end

return M
