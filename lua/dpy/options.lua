--- dpy.options: the one mechanism that checks option tables — a config's keys, every component's
-- options, every API function's option table — against a schema, with the nearest valid name
-- suggested for a misspelt key.
-- A schema maps each valid key to a rule (`true` accepts any value):
--   { type = "integer" | "number" | "string" | "boolean" | "table" | "function" | "list" | "path",
--     of = element type (lists), min =, max = (inclusive), above =, below = (strict; a list's
--     bounds are its entries'; no number is infinite, NaN none),
--     one_of = { values }, check = function(v) -> nil | message, default =, doc = "...",
--     fields = a schema (tables: its keys checked against it, as options.problem does) }
-- "list" is a table of positional entries (of `of`); "path" is a string naming a file or a
-- directory, made absolute against the config's directory where a config names it (exists =
-- "file": it must be a readable file). `required = true`: the option must be given. `kind =` and
-- `list_of =` name a registry kind: the value is one component entry of it, or a list of them.
local M = {}

--- Edit distance between two short strings: letters inserted, deleted, changed, or two
-- neighbours swapped ("medain" is one slip from "median"), each one edit (optimal string alignment).
function M.distance(a, b)
  local before, prev = {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        cur[j] = math.min(cur[j], before[j - 2] + 1)
      end
    end
    before, prev = prev, cur
  end
  return prev[#b]
end

local function names_of(set)
  local list = {}
  if set[1] ~= nil then
    for i, v in ipairs(set) do list[i] = v end
  else
    for k in pairs(set) do list[#list + 1] = k end
  end
  table.sort(list, function(a, b) return tostring(a) < tostring(b) end)
  return list
end

--- The nearest of names (a list or a set) to word, if it is near enough to be a likely typo
-- (a case-only difference always is).
function M.nearest(word, names)
  local best, best_d
  for _, name in ipairs(names_of(names)) do
    if type(name) == "string" then
      local d = name:lower() == word:lower() and 0 or M.distance(word, name)
      if not best_d or d < best_d then best, best_d = name, d end
    end
  end
  if best and best_d <= math.max(2, #word // 3) then return best end
end

--- " (did you mean 'x'?)" or "".
function M.suggest(word, names)
  local near = type(word) == "string" and M.nearest(word, names)
  return near and string.format(" (did you mean '%s'?)", near) or ""
end

local function article(word)
  return word:match("^[aeiou]") and "an " .. word or "a " .. word
end

local function is_list(t)
  if type(t) ~= "table" then return false end
  local n = #t
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

-- Whether value has the type a rule names (an integral float counts as an integer, as
-- lua_tointeger has it: 2.0 is 2).
local function has_type(value, wanted)
  if wanted == "integer" then
    return math.type(value) == "integer" or (math.type(value) == "float" and math.tointeger(value) ~= nil)
  end
  if wanted == "number" then return type(value) == "number" end
  if wanted == "path" then return type(value) == "string" and value ~= "" end
  if wanted == "list" then return is_list(value) end
  return (math.type(value) or type(value)) == wanted
end

local function bounds(rule)
  local parts = {}
  if rule.min then parts[#parts + 1] = ">= " .. tostring(rule.min) end
  if rule.above then parts[#parts + 1] = "> " .. tostring(rule.above) end
  if rule.max then parts[#parts + 1] = "<= " .. tostring(rule.max) end
  if rule.below then parts[#parts + 1] = "< " .. tostring(rule.below) end
  return table.concat(parts, " and ")
end

-- Whether a number is outside a rule's bounds (NaN always is).
local function out_of_range(value, rule)
  return (rule.min and value < rule.min) or (rule.max and value > rule.max)
         or (rule.above and value <= rule.above) or (rule.below and value >= rule.below) or value ~= value
end

--- A description of what a rule accepts ("an integer >= 0").
function M.describe(rule)
  if rule == true then return "any value" end
  if rule.one_of then
    local shown = {}
    for i, v in ipairs(rule.one_of) do shown[i] = string.format("%q", v) end
    return "one of " .. table.concat(shown, ", ")
  end
  local t = rule.type or "value"
  if t == "list" and rule.of then t = "list of " .. rule.of .. "s" end
  local b = bounds(rule)
  return article(t) .. (b ~= "" and " " .. b or "")
end

--- How a value is shown in a message: 1.5, the string "big", a table, boolean true.
function M.show(value)
  if type(value) == "string" then return string.format("the string %q", value) end
  if type(value) == "number" then return tostring(value) end
  if type(value) == "table" then return "a table" end
  if value == nil then return "nil" end
  return type(value) .. " " .. tostring(value)
end

--- "what must be..." or "what: unknown option..." (a table's field problem starts with ": ").
function M.join(what, err)
  return what .. (err:sub(1, 2) == ": " and "" or " ") .. err
end

--- nil when value satisfies rule, else a message ("must be an integer >= 0, got 1.5"; for a
-- table with fields: ": option 'drop' must be ...").
function M.check_value(value, rule)
  if rule == true then return nil end
  if rule.list_of and not is_list(value) then
    return string.format("must be a list of %s entries, got %s", rule.list_of, M.show(value))
  end
  if rule.one_of then
    for _, v in ipairs(rule.one_of) do if v == value then return nil end end
    return string.format("must be %s, got %s%s", M.describe(rule),
                         type(value) == "string" and string.format("%q", value) or M.show(value),
                         M.suggest(value, rule.one_of))
  end
  if rule.type and not has_type(value, rule.type) then
    return string.format("must be %s, got %s", M.describe(rule), M.show(value))
  end
  if type(value) == "number" then
    if out_of_range(value, rule) then return string.format("must be %s, got %s", M.describe(rule), tostring(value)) end
    if value == math.huge or value == -math.huge then   -- past every bound of one side (inf > 0)
      return string.format("must be a finite %s, got %s", (M.describe(rule):gsub("^an? ", "")), tostring(value))
    end
  end
  if rule.type == "list" and rule.of then   -- a list's bounds are its entries'
    for i, v in ipairs(value) do
      local bad = not has_type(v, rule.of)
                  or type(v) == "number" and (out_of_range(v, rule) or v == math.huge or v == -math.huge)
      if bad then
        return string.format("must be %s, got %s at [%d]", M.describe(rule), M.show(v), i)
      end
    end
  end
  if rule.fields and type(value) == "table" then
    local err = M.problem(value, rule.fields, "", true)
    if err then return err end
  end
  if rule.check then return rule.check(value) end
end

--- nil when every key of opts is in schema and its value satisfies the key's rule, else a
-- message naming the option; [1] (a component entry's name) is skipped, any other position refused
-- (unnamed: [1] too, a table of fields having no name: faults = { 0.5 } would inject nothing).
function M.problem(opts, schema, what, unnamed)
  local keys = {}
  for k, v in pairs(opts) do
    if math.type(k) ~= "integer" then
      keys[#keys + 1] = tostring(k)
    elseif k ~= 1 or unnamed then
      return string.format("%s: options are named (key = value), got %s at position [%d]", what, M.show(v), k)
    end
  end
  table.sort(keys)   -- the same key reported first, run after run
  for _, k in ipairs(keys) do
    local rule = schema[k]
    if rule == nil then
      local names = names_of(schema)
      if #names == 0 then   -- not an empty "valid: "
        return string.format("%s: unknown option '%s'; %s takes no options", what, k,
                             type(opts[1]) == "string" and opts[1] or "it")
      end
      return string.format("%s: unknown option '%s'%s; valid: %s", what, k, M.suggest(k, schema),
                           table.concat(names, ", "))
    end
    local err = M.check_value(opts[k], rule)
    if err then return M.join(string.format("%s: option '%s'", what, k), err) end
  end
  for k, rule in pairs(schema) do
    if rule ~= true and rule.required and opts[k] == nil then
      return string.format("%s: option '%s' is required (%s)", what, k, M.describe(rule))
    end
  end
end

--- Raises (at level; 0: no position) unless options.problem finds nothing; returns opts.
function M.check(opts, schema, what, level)
  local err = M.problem(opts, schema, what)
  if err then error(err, level == 0 and 0 or (level or 1) + 1) end
  return opts
end

--- value as the code behind a rule takes it: an integral float where an integer belongs as that
-- integer (in a list of integers too). check_value takes 2.0 for 2, but the code behind it need
-- not: dpy.random.new refused seed = 2.0. A valid value is expected.
function M.normalize(value, rule)
  if type(rule) ~= "table" then return value end
  if rule.type == "integer" and math.type(value) == "float" then return math.tointeger(value) or value end
  if rule.type == "list" and rule.of == "integer" and type(value) == "table" then
    local out
    for i, v in ipairs(value) do
      if math.type(v) == "float" and math.tointeger(v) then
        out = out or table.move(value, 1, #value, 1, {})
        out[i] = math.tointeger(v)
      end
    end
    return out or value
  end
  return value
end

--- A copy of opts with each missing key that has a default set to it.
function M.with_defaults(opts, schema)
  local out = {}
  for k, v in pairs(opts) do out[k] = v end
  for k, rule in pairs(schema) do
    if out[k] == nil and rule ~= true and rule.default ~= nil then out[k] = rule.default end
  end
  return out
end

--- Raises unless value has the Lua type wanted ("integer" and "number" are told apart).
function M.check_type(value, wanted, what, level)
  if not has_type(value, wanted) then
    error(string.format("%s must be %s, got %s", what, article(wanted), M.show(value)), (level or 1) + 1)
  end
  return value
end

return M
