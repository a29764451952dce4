--- dpy.payload: the largest payload a node of a run may send, so that a receiving process refuses
-- a larger one before allocating anything (issue: a peer promising 1 GiB made a process grow by
-- 540 MB). It is the config's model encoded by its transform chain at worst, or what its
-- algorithm or sharing rule declares (`payload_bound`), and never under CONTROL bytes (the small
-- messages: sample counts, failure notices, key exchanges).
local container = require "dpy.container"
local registry = require "dpy.registry"
local transforms = require "dpy.transforms"

local M = {}

M.CONTROL = 64 * 1024
M.UNBOUNDED = 1 << 30   -- a transform without a `bound` leaves the limit here
M.WIRE = 0xFFFFFFFF     -- a packet's length field has 32 bits

--- payload.limit(cfg) -> bytes, values: the run's payload limit and its model's size in values.
-- A component declares larger messages than its model's encoding with
-- `payload_bound = function(cfg, values, encoded) return bytes end` on its spec (encoded: the
-- chain's worst case for the model, nil when unknown).
function M.limit(cfg)
  local model = container.model(cfg, registry.build("dataset", cfg.dataset, { train = true }))
  local values = model:numel()
  model:free()
  local encoded = transforms.chain(cfg.transforms):encoded_bound(values)
  local limit = math.max(M.CONTROL, encoded or M.UNBOUNDED)
  local specs = { registry.spec("algorithm", cfg.algorithm) }
  if specs[1].graph or specs[1].sharing then specs[2] = registry.spec("sharing", cfg.sharing) end
  for _, spec in ipairs(specs) do
    if spec.payload_bound then limit = math.max(limit, spec.payload_bound(cfg, values, encoded)) end
  end
  if limit > M.WIRE and cfg.processes > 1 then
    error(string.format("a model of %d values needs payloads of up to %d bytes; a packet holds at most %d "
                        .. "(add a transform that makes it smaller, or use one process)", values, limit, M.WIRE), 0)
  end
  return math.min(limit, M.WIRE), values
end

return M
