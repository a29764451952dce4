--- The cnn model for 1 x 28 x 28 images (MNIST, Fashion-MNIST): the model DecentralizePy users
-- run on this data, 215,370 parameters for 10 classes.
local registry = require "dpy.registry"
local nn = require "dpy.nn"

return registry.register {
  kind = "model",
  name = "cnn",
  outputs = "logits",   -- loss = "nll" is refused before the run
  doc = "conv 1->16 5x5 pad 2, relu, maxpool 2; conv 16->32 5x5 pad 2, relu, maxpool 2; "
        .. "linear 1568->128, relu; linear 128->classes",
  options = { classes = { type = "integer", min = 1, doc = "outputs (the dataset's classes)" } },
  new = function(cfg, ctx)
    local classes = cfg.classes or (ctx.dataset and ctx.dataset.classes) or 10
    return nn.sequential {
      nn.conv2d(1, 16, 5, { padding = 2 }), nn.relu(), nn.maxpool2d(2),
      nn.conv2d(16, 32, 5, { padding = 2 }), nn.relu(), nn.maxpool2d(2),
      nn.flatten(), nn.linear(32 * 7 * 7, 128), nn.relu(), nn.linear(128, classes),
    }
  end,
}
