-- dpy.optim: updates checked against hand-computed ones (loss = 2w, so the gradient is 2).
local tensor = require "dpy.tensor"
local optim = require "dpy.optim"
local nn = require "dpy.nn"

local function steps(make, n)
  local w = tensor.new({ 1.0 }, "float64"):requires_grad_()
  local opt = make({ w })
  local values = {}
  for i = 1, n do
    opt:zero_grad()
    local loss = (w * 2):sum()
    loss:backward()
    opt:step()
    values[i] = w:item()
  end
  return values, opt, w
end

local function near(expected, got)
  for i, v in ipairs(expected) do
    assert.is_true(math.abs(v - got[i]) < 1e-6, string.format("step %d: %g expected, got %g", i, v, got[i]))
  end
end

describe("optimizers", function()
  it("sgd with momentum", function()
    -- buf1 = 2, w = 1 - 0.2; buf2 = 0.9 * 2 + 2 = 3.8, w = 0.8 - 0.38
    near({ 0.8, 0.42 }, steps(function(p) return optim.sgd(p, { lr = 0.1, momentum = 0.9 }) end, 2))
  end)

  it("sgd with nesterov and with weight decay", function()
    near({ 0.62 }, steps(function(p) return optim.sgd(p, { lr = 0.1, momentum = 0.9, nesterov = true }) end, 1))
    near({ 0.79 }, steps(function(p) return optim.sgd(p, { lr = 0.1, weight_decay = 0.1 }) end, 1))
  end)

  it("zero_grad drops the gradients: a step without a backward leaves the parameter alone", function()
    local values, opt, w = steps(function(p) return optim.sgd(p, { lr = 0.1, momentum = 0.9 }) end, 1)
    near({ 0.8 }, values)
    opt:zero_grad()
    opt:step()   -- zeroed (not dropped) gradients would move w by the momentum: 0.8 - 0.18
    near({ 0.8 }, { w:item() })
    local m = nn.linear(2, 1)
    local o2 = optim.sgd(m, { lr = 0.1 })
    m(tensor.ones(1, 2)):sum():backward()
    o2:zero_grad()
    assert.are.same({ 0, 0, 0 }, m:grad_flat():totable())
  end)

  it("adam and adamw take a first step of lr (decoupled decay for adamw)", function()
    near({ 0.9 }, steps(function(p) return optim.adam(p, { lr = 0.1 }) end, 1))
    near({ 0.89 }, steps(function(p) return optim.adamw(p, { lr = 0.1, weight_decay = 0.1 }) end, 1))
  end)

  it("takes a module's parameters", function()
    local m = nn.linear(2, 1)
    local before = m:get_flat():totable()
    local opt = optim.sgd(m, { lr = 1 })
    local loss = m(tensor.ones(1, 2)):sum()
    loss:backward()
    opt:step()
    local after = m:get_flat():totable()
    for i = 1, 3 do assert.is_true(math.abs(before[i] - 1 - after[i]) < 1e-6) end
  end)

  it("reads and sets the learning rate; schedules change it", function()
    local _, opt = steps(function(p) return optim.sgd(p, { lr = 0.1 }) end, 1)
    assert.are.equal(0.1, opt:lr())
    local s = optim.step_lr(opt, { step_size = 2, gamma = 0.5 })
    near({ 0.1, 0.05, 0.05, 0.025 }, { s:step(), s:step(), s:step(), s:step() })
    opt:set_lr(1)
    local c = optim.cosine_lr(opt, { t_max = 2 })
    near({ 0.5, 0 }, { c:step(), c:step() })
    -- an infinite rate made every parameter -inf at the next step, silently
    for _, bad in ipairs { math.huge, -1, 0 / 0 } do
      assert.error_matches(function() opt:set_lr(bad) end, "learning rate must be a finite number >= 0")
    end
    assert.are.equal(0, opt:lr())
  end)

  it("saves its state and restores it", function()
    local w = tensor.new({ 1.0 }, "float64"):requires_grad_()
    local opt = optim.sgd({ w }, { lr = 0.1, momentum = 0.9 })
    ;(w * 2):sum():backward()
    opt:step()
    local path = tmpdir() .. "/opt.bin"
    assert.is_true(optim.save(opt, path))
    -- a fresh optimizer with the saved momentum buffer takes the same second step
    local w2 = tensor.new({ w:item() }, "float64"):requires_grad_()
    local opt2 = optim.sgd({ w2 }, { lr = 0.1, momentum = 0.9 })
    assert.is_true(optim.load(opt2, path))
    opt:zero_grad()
    ;(w * 2):sum():backward()
    opt:step()
    ;(w2 * 2):sum():backward()
    opt2:step()
    assert.is_true(math.abs(w:item() - w2:item()) < 1e-12)
    local ok, err = optim.load(opt2, tmpdir() .. "/nope.bin")
    assert.is_nil(ok)
    assert.is_string(err)
  end)

  it("reset drops the state: the next step is a fresh optimizer's, the learning rate stays", function()
    local _, opt, w = steps(function(p) return optim.sgd(p, { lr = 0.1, momentum = 0.9 }) end, 2)
    opt:set_lr(0.05)
    opt:reset()
    opt:zero_grad()
    ;(w * 2):sum():backward()
    opt:step()
    -- buf = 2 again (no 0.9 * 3.8 carried over): w = 0.42 - 0.05 * 2
    near({ 0.32 }, { w:item() })
    assert.are.equal(0.05, opt:lr())
    -- adam's step count too: its first step after a reset is lr again
    local _, a, wa = steps(function(p) return optim.adam(p, { lr = 0.1 }) end, 3)
    local before = wa:item()
    a:reset()
    a:zero_grad()
    ;(wa * 2):sum():backward()
    a:step()
    near({ before - 0.1 }, { wa:item() })
  end)

  it("names unknown options and bad values", function()
    assert.error_matches(function() optim.sgd({}, { lr = 0.1, momentun = 0.9 }) end,
                         "optim.sgd: unknown option 'momentun' %(did you mean 'momentum'%?%)")
    assert.error_matches(function() optim.sgd({ tensor.ones(1) }, { lr = -1 }) end,
                         "optim.sgd: option 'lr' must be a number > 0, got %-1")
    assert.error_matches(function() optim.sgd({ tensor.ones(1) }, { lr = 0.1, nesterov = true }) end,
                         "optim.sgd: .*[Nn]esterov")
  end)
end)
