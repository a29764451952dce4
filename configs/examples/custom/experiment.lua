-- A complete custom experiment: the researcher's own dataset (CSV files), model and sharing rule,
-- each a short Lua file beside this config, named by path (relative to this file).
--   scripts/dpy configs/examples/custom/make_data.lua      # writes data/train.csv, data/test.csv
--   scripts/dpy run configs/examples/custom/experiment.lua
nodes = 8
graph = { "regular", degree = 3 }
rounds = 20
local_steps = 5
batch_size = 32
eval_every = 5
dataset = { "data/csv.lua", dir = "data" }            -- data/csv.lua reads data/train.csv, data/test.csv
model = { "models/wide_mlp.lua", hidden = 256 }
optimizer = { "sgd", lr = 0.05, momentum = 0.9 }
sharing = { "rules/clipped_gossip.lua", radius = 2.0 } -- a robust gossip rule, in 30 lines of Lua
