--- dpy.tensor: tensors over libtorch. The C core (dpy.tensor.core) does the work; this file
-- adds the methods that are plain Lua, the printer, seeding and the no-grad scope.
-- Positions (dims, indices, narrow starts, t[i]) are 0-based, as in libtorch and PyTorch.
local core = require "dpy.tensor.core"
local generator = require "dpy.generator.core"

local M = {}
for k, v in pairs(core) do
  if k ~= "methods" then M[k] = v end
end
local methods = core.methods

--- A new seeded generator (dpy.Generator) for the random constructors' {generator = g}.
M.generator = generator.new

--- Seeds this state's default generator: rand, randn, randint, randperm, bernoulli, the initial
-- weights of nn layers and dropout masks all draw from it.
function M.manual_seed(seed)
  generator.default():seed(seed)
end

--- The state's default dpy.Generator.
M.default_generator = generator.default

-- Autograd's mode is libtorch's, one per OS thread, and a coroutine that yields inside no_grad
-- would leave it off for its resumer: outside[co] is the mode co's outermost no_grad gives back,
-- which coroutine.yield gives the resumer while co is suspended (and takes anew at each resume).
local outside = setmetatable({}, { __mode = "k" })
local yield = coroutine.yield

local function resumed(co, mine, ...)
  outside[co] = core.set_grad_enabled(mine)
  return ...
end

function coroutine.yield(...)   -- luacheck: ignore 122 (the one yield every coroutine calls)
  local co = coroutine.running()
  local out = outside[co]
  if out == nil or not coroutine.isyieldable() then return yield(...) end
  local mine = core.set_grad_enabled(out)
  return resumed(co, mine, yield(...))
end

--- Runs fn(...) with autograd off and returns its results; the previous mode comes back even
-- when fn raises (the error is re-raised), and while a coroutine that yields inside it is suspended.
function M.no_grad(fn, ...)
  local co = coroutine.running()
  local outermost = outside[co] == nil
  local prev = core.set_grad_enabled(false)
  if outermost then outside[co] = prev end
  local res = table.pack(pcall(fn, ...))
  if outermost then prev, outside[co] = outside[co], nil end
  core.set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- {==== methods written in Lua ====}

--- t:shape() -> {sizes...}, the same as t:size()
function methods:shape() return self:size() end

--- t:split(size [, dim]) -> list of views of at most size elements along dim (default 0)
function methods:split(size, dim)
  dim = dim or 0
  if math.type(size) ~= "integer" or size < 1 then
    error("bad argument #1 to 'split' (a positive integer size expected)", 2)
  end
  local n, parts = self:size(dim), {}
  for start = 0, n - 1, size do
    parts[#parts + 1] = self:narrow(dim, start, math.min(size, n - start))
  end
  return parts
end

--- t:chunk(n [, dim]) -> list of at most n views, as even as possible (as libtorch's chunk)
function methods:chunk(n, dim)
  if math.type(n) ~= "integer" or n < 1 then
    error("bad argument #1 to 'chunk' (a positive integer count expected)", 2)
  end
  local size = math.max(1, (self:size(dim or 0) + n - 1) // n)
  return self:split(size, dim)
end

--- t:t() -> the transpose of a 2-d tensor
function methods:t()
  if self:dim() ~= 2 then error("t() expects a 2-d tensor, got " .. self:dim() .. "-d", 2) end
  return self:transpose(0, 1)
end

for name, dtype in pairs { float = "float32", double = "float64", half = "float16",
                           long = "int64", int = "int32", byte = "uint8", bool = "bool" } do
  methods[name] = function(self) return self:to(dtype) end
end

--- t:tolist(), the same as t:totable()
methods.tolist = methods.totable

--- t:allclose(u [, rtol [, atol]]) -> boolean
function methods:allclose(u, rtol, atol)
  rtol, atol = rtol or 1e-5, atol or 1e-8
  local diff <close> = (self - u):abs()
  local tol <close> = u:abs() * rtol + atol
  local ok <close> = diff:le(tol):all()
  return ok:item()
end

-- {==== printing ====}

local EDGE, LIMIT = 3, 1000   -- summarize dims longer than 2 * EDGE once numel > LIMIT

local function format_number(v, is_float)
  if type(v) == "boolean" then return tostring(v) end
  if not is_float then return string.format("%d", v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  local a = math.abs(v)
  if a ~= 0 and (a >= 1e6 or a < 1e-4) then return string.format("%.4e", v) end
  return string.format("%.4f", v)
end

-- Collects the shown values as strings in a nested table; "..." marks elided runs.
local function collect(t, summarize, is_float)
  if t:dim() == 0 then return format_number(t:item(), is_float) end
  local n, out = t:size(0), {}
  local function add(i)
    local row <close> = t[i]
    out[#out + 1] = collect(row, summarize, is_float)
  end
  if summarize and n > 2 * EDGE then
    for i = 0, EDGE - 1 do add(i) end
    out[#out + 1] = "..."
    for i = n - EDGE, n - 1 do add(i) end
  else
    for i = 0, n - 1 do add(i) end
  end
  return out
end

local function width_of(v, w)
  if type(v) == "string" then return math.max(w, #v) end
  for _, x in ipairs(v) do w = width_of(x, w) end
  return w
end

local function render(v, width, indent)
  if type(v) == "string" then return string.rep(" ", width - #v) .. v end
  local parts, nested = {}, type(v[1]) == "table"
  for i, x in ipairs(v) do
    parts[i] = (x == "..." and nested) and "..." or render(x, width, indent + 1)
  end
  local sep = nested and (",\n" .. string.rep(" ", indent + 1)) or ", "
  return "[" .. table.concat(parts, sep) .. "]"
end

--- The text of a tensor: a header with dtype, device and shape, then its values (summarized
-- beyond 1000 elements).
function M.format(t)
  local header = string.format("dpy.Tensor(%s, %s, [%s])", t:dtype(), t:device(),
                               table.concat(t:size(), ", "))
  if t:numel() == 0 then return header end
  local dtype = t:dtype()
  local is_float = dtype:find("float") ~= nil
  local shown = collect(t:detach(), t:numel() > LIMIT, is_float)
  return header .. "\n" .. render(shown, width_of(shown, 0), 0)
end

local mt = debug.getregistry()["dpy.Tensor"]
local raw_tostring = mt.__tostring
mt.__tostring = function(t)
  local ok, text = pcall(M.format, t)
  return ok and text or raw_tostring(t)   -- a freed tensor, for one
end

return M
