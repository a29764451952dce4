-- The Lua side of the call-overhead benchmark: a + b on two 4-element float32 tensors.
-- usage: dpy-lua bench/op_lua.lua CALLS
local tensor = require "dpy.tensor"
local host = require "dpy.host.core"

local n = tonumber(arg[1] or 200000)
local a, b = tensor.ones(4), tensor.ones(4)
for _ = 1, 1000 do local c <close> = a + b end
local t0 = host.clock()
for _ = 1, n do
  local c <close> = a + b
end
print(string.format("us_per_call %.3f", (host.clock() - t0) / n * 1e6))
