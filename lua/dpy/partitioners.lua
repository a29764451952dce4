--- dpy.partitioners: the partitioners a config names (partition = { "dirichlet", alpha = 0.5 }),
-- registered with their options; their code is dpy.partition's, required when one is built. A
-- node checks its config's partition but never splits the data (the launcher wrote partition.pt),
-- so its Lua state holds these few lines, not the partitioners.
local registry = require "dpy.registry"

local M = {}

local SEED = { type = "integer", doc = "the seed (the run's)" }
M.OPTIONS = {
  iid = { seed = SEED },
  dirichlet = { alpha = { type = "number", above = 0, required = true, doc = "concentration: small is skewed" },
                min_size = { type = "integer", min = 0, doc = "redraw until every node has this many" }, seed = SEED },
  shards = { shards_per_node = { type = "integer", min = 1, doc = "label-sorted shards per node" }, seed = SEED },
  gamma_similarity = { gamma = { type = "number", min = 0, max = 1, doc = "the IID fraction" }, seed = SEED },
  class_list = { classes = { type = "list", of = "table", doc = "per node, the classes it gets" }, seed = SEED },
}
for name, opts in pairs(M.OPTIONS) do
  registry.register {
    kind = "partitioner", name = name, options = opts, doc = "partition." .. name,
    new = function(cfg, ctx)
      local o = { seed = ctx.seed }
      for k in pairs(opts) do if cfg[k] ~= nil then o[k] = cfg[k] end end
      return require("dpy.partition")[name](ctx.labels, ctx.nodes, o)
    end,
  }
end

registry.register {
  kind = "partitioner", name = "natural",
  options = { assign = { type = "string", one_of = { "contiguous", "balanced" }, default = "contiguous",
                         doc = "how groups map to nodes when there are more groups than nodes" } },
  doc = "partition.natural: the dataset's groups (writers, hospitals), each whole on one node",
  new = function(cfg, ctx)
    if ctx.groups == nil then
      error(string.format("partition 'natural' needs a dataset with natural groups (femnist: writers, "
                          .. "camelyon17: hospitals); %s has none", ctx.dataset or "this dataset"), 0)
    end
    return require("dpy.partition").natural(ctx.groups, ctx.nodes, { assign = cfg.assign })
  end,
}

return M
