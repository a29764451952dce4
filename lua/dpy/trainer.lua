--- dpy.trainer: local training steps and evaluation. Tensors of each step are freed at once
-- (the GC cannot see their memory); nothing is done per sample in Lua.
local nn = require "dpy.nn"
local data = require "dpy.data"
local tensor = require "dpy.tensor"

local M = {}
local Trainer = {}
Trainer.__index = Trainer

--- trainer.new{model, optimizer, loader, loss = "cross_entropy"}
function M.new(t)
  local loss = nn[t.loss or "cross_entropy"]
  if not loss then error("trainer: unknown loss " .. tostring(t.loss), 2) end
  return setmetatable({ model = t.model, opt = t.optimizer, loader = t.loader, loss_fn = loss,
                        steps = 0, samples = 0 }, Trainer)
end

--- t:step() -> loss of one batch (a number), batch size, and whether it ended an epoch
function Trainer:step()
  local xb, yb, last = self.loader:next()
  local x <close> = xb
  local y <close> = yb
  self.opt:zero_grad()
  local out <close> = self.model(x)
  local loss <close> = self.loss_fn(out, y)
  loss:backward()
  self.opt:step()
  local n = y:size(0)
  self.steps, self.samples = self.steps + 1, self.samples + n
  return loss:item(), n, last
end

--- t:run(k) -> mean loss over k steps
function Trainer:run(k)
  local sum = 0
  for _ = 1, k do sum = sum + self:step() end
  return sum / k
end

--- trainer.evaluate(model, dataset [, {batch_size = 100, indices, loss}]) -> mean loss, accuracy
function M.evaluate(model, ds, opts)
  opts = opts or {}
  local loss_fn = nn[opts.loss or "cross_entropy"]
  local was_training = model:is_training()
  model:eval()
  local loader = data.loader(ds, { batch_size = opts.batch_size or 100, indices = opts.indices,
                                   shuffle = false })
  local total, correct, n = 0, 0, 0
  tensor.no_grad(function()
    for x, y in loader:epoch() do
      local out <close> = model(x)
      local l <close> = loss_fn(out, y, "sum")
      local pred <close> = out:argmax(1)
      local hits <close> = pred:eq(y):sum()
      total, correct, n = total + l:item(), correct + hits:item(), n + y:size(0)
      x:free()
      y:free()
    end
  end)
  model:train(was_training)
  return total / n, correct / n
end

return M
