--- dpy.transforms: state transforms that make shared vectors smaller, and the chain a config
-- names (`transforms = { { "uniform_asymmetric_quantization", bits = 8 }, { "zstd", level = 3 } }`).
-- A chain encodes in config order and decodes in reverse. Its id (a hash of the chain's
-- description) travels in every packet header, so a receiver configured differently refuses the
-- payload instead of decoding garbage. The built-in transforms are the files of
-- lua/dpy/transforms/, loaded by name (a node without transforms loads none).
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"

local M = {}

-- The chain's id on the wire: a hash of its description (0 is kept for "no transform").
local function chain_id(label)
  local h = require("dpy.random").hash32(label)   -- a chain of transforms only
  return h == 0 and 1 or h
end

local Chain = {}
Chain.__index = Chain

--- transforms.chain(list [, payload]) -> chain; raises with the entry's index on a bad entry.
-- payload: what a sharing rule with its own payload encodes to ({ dtype = "uint8", bound =
-- function(n) -> its most bytes for n values }); without one the chain's input is float32 values.
function M.chain(list, payload)
  local steps, labels = {}, {}
  local input = payload and payload.dtype or "float32"
  for i, entry in ipairs(list or {}) do
    local spec, err = registry.check("transform", entry)
    if not spec then error(string.format("transforms[%d]: %s", i, err), 0) end
    local ok, step = pcall(registry.build, "transform", entry)
    if not ok then error(string.format("transforms[%d] (%s): %s", i, spec.name, step), 0) end
    step.name = spec.name
    step.dtype = i == 1 and input or "uint8"   -- what this step receives
    if step.input == "float32" and i == 1 and input ~= "float32" then
      error(string.format("transforms[1]: %s encodes float32 values, but the sharing rule sends its own "
                          .. "payload (%s); leave it out, or use a lossless byte transform (zstd)",
                          spec.name, input), 0)
    end
    if step.input == "float32" and i > 1 then
      error(string.format("transforms[%d]: %s encodes float32 values, but transforms[%d] (%s) "
                          .. "outputs bytes; put it first", i, spec.name, i - 1, steps[i - 1].name), 0)
    end
    steps[i], labels[i] = step, step.label
  end
  local label = table.concat(labels, " | ")
  return setmetatable({ steps = steps, label = label, id = #steps > 0 and chain_id(label) or 0,
                        wire_dtype = #steps > 0 and "uint8" or input, input_bound = payload and payload.bound },
                      Chain)
end

--- chain:encode(flat [, sizes]) -> the payload tensor (flat itself when the chain is empty).
-- sizes, when given, receives { {bytes_in, bytes_out}, ... } per step.
function Chain:encode(flat, sizes)
  local t = flat
  for i, step in ipairs(self.steps) do
    local out = step.encode(t)
    if not tensor.is_tensor(out) or out:dtype() ~= "uint8" then   -- the wire's, which every decoder reads
      error(string.format("transforms[%d] (%s): encode returned %s, not uint8", i, step.name,
                          tensor.is_tensor(out) and "a " .. out:dtype() .. " tensor" or type(out)), 0)
    end
    if sizes then sizes[i] = { t:nbytes(), out:nbytes() } end
    if t ~= flat then t:free() end
    t = out
  end
  return t
end

-- The most bytes step i's decoder may produce when the chain's input is n float32 values (or a
-- sharing rule's payload for them): what the steps before it encode that to at worst (nil when a
-- step does not say).
function Chain:bounds(n)
  local max = { n and (self.input_bound and self.input_bound(n) or n * 4) }
  for i = 2, #self.steps do
    local bound = self.steps[i - 1].bound
    max[i] = max[i - 1] and bound and bound(max[i - 1])
  end
  return max
end

--- chain:encoded_bound(n) -> the most bytes the chain encodes n float32 values (or a sharing
-- rule's payload for them) to; nil when a step does not say.
function Chain:encoded_bound(n)
  local max = self:bounds(n)
  local last = self.steps[#self.steps]
  if not last then return max[1] end
  return max[#self.steps] and last.bound and last.bound(max[#self.steps])
end

--- chain:decode(payload [, n]) -> float32 tensor | nil, err (a malformed payload). n, the
-- number of values the receiver expects, bounds every step's output: a payload promising more
-- is refused before anything is allocated, and so is one that decodes to another count (float32 input).
function Chain:decode(payload, n)
  local t, max = payload, self:bounds(n)
  for i = #self.steps, 1, -1 do
    local step = self.steps[i]
    local out, err = step.decode(t, step.dtype, max[i])
    if t ~= payload then t:free() end
    if not out then return nil, string.format("%s: %s", step.name, err) end
    t = out
  end
  if n and not self.input_bound and t:numel() ~= n then   -- a vector of another model is never mixed in
    local got = t:numel()
    if t ~= payload then t:free() end
    return nil, string.format("%d values, but the model has %d", got, n)
  end
  return t
end

--- A metric name for step i's byte counts ("transform_1_zstd_bytes_in").
function Chain:metric(i, what)
  return string.format("transform_%d_%s_bytes_%s", i, self.steps[i].name, what)
end

return M
