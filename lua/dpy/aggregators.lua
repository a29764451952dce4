--- dpy.aggregators: robust aggregation of n vectors of dimension d, given as a list of 1-d tensors
-- or an n x d tensor; vectorized over coordinates (one sort, no per-coordinate Lua).
local tensor = require "dpy.tensor"

local M = {}

local function matrix(vectors)
  if tensor.is_tensor(vectors) then return vectors, false end
  return tensor.stack(vectors, 0), true
end

--- aggregators.mean(vectors) -> d tensor
function M.mean(vectors)
  local x, own = matrix(vectors)
  local r = x:mean(0)
  if own then x:free() end
  return r
end

--- The f a trimmed mean drops from each end: f itself, or floor(beta * n).
function M.trim_count(n, f, beta)
  if f then return f end
  return math.floor((beta or 0) * n)
end

--- aggregators.trimmed_mean(vectors, f) -> d tensor: per coordinate, the mean of the values left
-- after dropping the f largest and the f smallest. Needs n >= 2f + 1.
function M.trimmed_mean(vectors, f)
  local x, own = matrix(vectors)
  local n = x:size(0)
  if n < 2 * f + 1 then
    if own then x:free() end
    error(string.format("trimmed_mean: %d vector(s) are too few to drop f = %d from each end "
                        .. "(needs at least 2f + 1 = %d)", n, f, 2 * f + 1), 0)
  end
  local sorted, idx = x:sort(0)
  idx:free()
  if own then x:free() end
  local r = sorted:narrow(0, f, n - 2 * f):mean(0)
  sorted:free()
  return r
end

--- aggregators.median(vectors) -> d tensor: the coordinate-wise median (the lower of the two
-- middle values when n is even, as torch.median).
function M.median(vectors)
  local x, own = matrix(vectors)
  local r = x:median(0)
  if own then x:free() end
  return r
end

return M
