--- dpy.random: a small seeded generator in pure Lua (splitmix64), for decisions made in Lua
-- (partitions, node sampling) that must be identical in every process and on every machine.
local M = {}
M.__index = M

--- random.new(seed) -> rng
function M.new(seed)
  if math.type(seed) ~= "integer" then error("dpy.random.new: an integer seed expected", 2) end
  return setmetatable({ state = seed }, M)
end

--- random.hash32(s) -> the 32-bit FNV-1a hash of a string (ids every process derives alike)
function M.hash32(s)
  local h = 0x811c9dc5
  for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
  return h
end

--- rng:next64() -> a 64-bit integer
function M:next64()
  self.state = self.state + 0x9E3779B97F4A7C15
  local z = self.state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return z ~ (z >> 31)
end

--- rng:uniform() -> a float in [0, 1)
function M:uniform()
  return (self:next64() >> 11) * 2.0 ^ -53
end

--- rng:int(n) -> an integer in [0, n)
function M:int(n)
  return math.floor(self:uniform() * n)
end

--- rng:shuffle(list): Fisher-Yates, in place; returns list
function M:shuffle(list)
  for i = #list, 2, -1 do
    local j = self:int(i) + 1
    list[i], list[j] = list[j], list[i]
  end
  return list
end

--- rng:normal() -> a standard normal draw (Box-Muller)
function M:normal()
  local u1 = 1 - self:uniform()
  return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * self:uniform())
end

--- rng:gamma(alpha) -> a Gamma(alpha, 1) draw (Marsaglia and Tsang; boosted for alpha < 1)
function M:gamma(alpha)
  if alpha < 1 then
    return self:gamma(alpha + 1) * (1 - self:uniform()) ^ (1 / alpha)
  end
  local d = alpha - 1 / 3
  local c = 1 / math.sqrt(9 * d)
  while true do
    local x, v
    repeat
      x = self:normal()
      v = 1 + c * x
    until v > 0
    v = v * v * v
    local u = 1 - self:uniform()
    if math.log(u) < 0.5 * x * x + d - d * v + d * math.log(v) then return d * v end
  end
end

--- rng:dirichlet(alpha, k) -> k proportions summing to 1: Gamma(alpha) draws, normalized. Below
-- alpha = 1 they are taken as logarithms (gamma's boost, log G(alpha + 1) + log(u) / alpha, the
-- same draws): a tiny alpha's draws underflow to 0 (alpha 0.001: about half of them), and all of
-- them 0 would give 0/0 proportions.
function M:dirichlet(alpha, k)
  local p, sum = {}, 0
  if alpha < 1 then
    local top = -math.huge
    for i = 1, k do
      p[i] = math.log(self:gamma(alpha + 1)) + math.log(1 - self:uniform()) / alpha
      top = math.max(top, p[i])
    end
    for i = 1, k do p[i] = math.exp(p[i] - top) end
  else
    for i = 1, k do p[i] = self:gamma(alpha) end
  end
  for i = 1, k do sum = sum + p[i] end
  for i = 1, k do p[i] = p[i] / sum end
  return p
end

return M
