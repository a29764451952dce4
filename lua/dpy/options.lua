--- dpy.options: checking option tables, with the nearest valid name suggested for a misspelt key.
local M = {}

--- Levenshtein distance between two short strings.
function M.distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

--- The nearest of names (a list or a set) to word, if it is near enough to be a likely typo.
function M.nearest(word, names)
  local best, best_d
  local list = names[1] and names or {}
  if not names[1] then
    for k in pairs(names) do list[#list + 1] = k end
  end
  table.sort(list)
  for _, name in ipairs(list) do
    local d = M.distance(word, name)
    if not best_d or d < best_d then best, best_d = name, d end
  end
  if best and best_d <= math.max(2, #word // 3) then return best end
end

--- " (did you mean 'x'?)" or "".
function M.suggest(word, names)
  local near = type(word) == "string" and M.nearest(word, names)
  return near and string.format(" (did you mean '%s'?)", near) or ""
end

--- Raises (at level) unless every key of opts is in allowed (a set); positional entries
-- ([1], the component name) are skipped. what names the table in the message.
function M.check(opts, allowed, what, level)
  for k in pairs(opts) do
    if math.type(k) ~= "integer" and not allowed[k] then
      local names = {}
      for name in pairs(allowed) do names[#names + 1] = name end
      table.sort(names)
      error(string.format("%s: unknown option '%s'%s; valid: %s", what, tostring(k),
                          M.suggest(k, allowed), table.concat(names, ", ")),
            level == 0 and 0 or (level or 1) + 1)
    end
  end
  return opts
end

--- Raises unless value has the Lua type wanted ("integer" and "number" are told apart).
function M.check_type(value, wanted, what, level)
  local got = math.type(value) or type(value)
  local ok = got == wanted or (wanted == "number" and type(value) == "number")
  if not ok then
    error(string.format("%s must be %s %s, got %s", what, wanted:match("^[aeiou]") and "an" or "a",
                        wanted, got), (level or 1) + 1)
  end
  return value
end

return M
