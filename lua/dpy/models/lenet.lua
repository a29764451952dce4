--- LeNet-5 for 3 x 32 x 32 images (CIFAR).
local registry = require "dpy.registry"
local nn = require "dpy.nn"

return registry.register {
  kind = "model",
  name = "lenet",
  outputs = "logits",   -- loss = "nll" is refused before the run
  doc = "conv 3->6 5x5, relu, maxpool 2; conv 6->16 5x5, relu, maxpool 2; "
        .. "linear 400->120, relu; linear 120->84, relu; linear 84->classes",
  options = { classes = { type = "integer", min = 1, doc = "outputs (the dataset's classes)" } },
  new = function(cfg, ctx)
    local classes = cfg.classes or (ctx.dataset and ctx.dataset.classes) or 10
    return nn.sequential {
      nn.conv2d(3, 6, 5), nn.relu(), nn.maxpool2d(2),
      nn.conv2d(6, 16, 5), nn.relu(), nn.maxpool2d(2),
      nn.flatten(), nn.linear(16 * 5 * 5, 120), nn.relu(), nn.linear(120, 84), nn.relu(),
      nn.linear(84, classes),
    }
  end,
}
