--- The femnist dataset: FEMNIST in LEAF's JSON layout, dir/train/*.json and dir/test/*.json, each
-- { users = {...}, num_samples = {...}, user_data = { [user] = { x = {{784 numbers in 0..1}},
-- y = {labels 0..61} } } } (LEAF's data_to_json.py: x is a 28 x 28 grey image, row-major, byte / 255).
-- Samples follow the files in byte order of their names, then each file's users list, then each
-- user's samples. The writer of each sample is its group (groups, int64; group_names[id + 1] is
-- the writer; ids are the writers' names in byte order): the "natural" partitioner's input.
-- mean and std default to the training split's statistics.
-- A split's decoded tensors are kept in the dataset cache directory (data.cache_dir()), keyed on
-- its JSON files' names, sizes and mtimes: parsing FEMNIST's JSON takes minutes, reading the
-- cache seconds.
local data = require "dpy.data"
local core = require "dpy.data.core"
local tensor = require "dpy.tensor"
local options = require "dpy.options"
local paths = require "dpy.paths"
local cjson = require("cjson").new()

local M = {}

M.CLASSES = 62
local PIXELS = 784

M.options = {
  dir = { type = "path", doc = "LEAF's data/femnist/data: the folder of train/ and test/" },
  mean = { type = "list", of = "number", check = data.unit_scale, doc = "{mean} (default: the training split's)" },
  std = { type = "list", of = "number", above = 0, check = data.unit_scale,
          doc = "{std} (default: the training split's)" },
}

local HOW = "LEAF's data/femnist/data, made by its preprocess.sh (e.g. ./preprocess.sh -s niid --sf 1.0 "
            .. "-k 0 -t sample); LEAF: github.com/TalwalkarLab/leaf"

local function fail(fmt, ...) error("femnist: " .. string.format(fmt, ...), 0) end

local function json_files(dir)
  local _, files = core.list_dir(dir)
  if not _ then fail("%s (option 'dir': %s)", files, HOW) end
  local out = {}
  for _, f in ipairs(files) do
    if f:match("%.json$") then out[#out + 1] = dir .. "/" .. f end
  end
  if #out == 0 then fail("%s: no .json file (option 'dir': %s)", dir, HOW) end
  return out
end

local function read_json(path)
  local f, err = io.open(path, "rb")
  if not f then fail("%s", err) end
  local ok, t = pcall(cjson.decode, f:read("a"))   -- no local keeps the text (up to GBs)
  f:close()
  if not ok then fail("%s: not valid JSON (%s)", path, tostring(t)) end
  if type(t) ~= "table" or type(t.users) ~= "table" or type(t.num_samples) ~= "table"
     or type(t.user_data) ~= "table" then
    fail("%s: not LEAF's layout (an object with users, num_samples and user_data expected)", path)
  end
  if #t.users ~= #t.num_samples then
    fail("%s: %d users but %d num_samples", path, #t.users, #t.num_samples)
  end
  return t
end

-- One user's images (uint8 n x 1 x 28 x 28) and labels (int64 n), checked.
local function user_tensors(path, user, d, count)
  local where = string.format("%s: user %s", path, user)
  if type(d) ~= "table" or type(d.x) ~= "table" or type(d.y) ~= "table" then
    fail("%s: user_data has no x and y lists", where)
  end
  if #d.x ~= count or #d.y ~= count then
    fail("%s: num_samples says %d, but x has %d and y %d", where, count, #d.x, #d.y)
  end
  for j, v in ipairs(d.y) do
    if math.type(v) == nil or v ~= math.floor(v) or v < 0 or v >= M.CLASSES then
      fail("%s: y[%d] = %s is not a class in 0..%d", where, j,
           math.type(v) and string.format("%.17g", v) or tostring(v), M.CLASSES - 1)
    end
  end
  local labels = {}
  for j, v in ipairs(d.y) do labels[j] = math.tointeger(v) end
  local fast <close> = core.unit_bytes(d.x, count, PIXELS)   -- nil: not rows of pixels; said below
  if fast then return fast:reshape { count, 1, 28, 28 }, tensor.new(labels, "int64") end
  local ok, x = pcall(tensor.new, d.x, "float32")
  if not ok then fail("%s: x: %s", where, (tostring(x):gsub("^tensor%.new: ", ""))) end
  local bad
  if x:dim() ~= 2 or x:size(1) ~= PIXELS then
    bad = string.format("x must hold rows of %d pixels, got %s", PIXELS, table.concat(x:size(), "x"))
  else
    local lo <close> = x:min()
    local hi <close> = x:max()
    if not (lo:item() >= 0 and hi:item() <= 1) then   -- NaN too
      bad = string.format("pixels must lie in 0..1, found %g..%g", lo:item(), hi:item())
    end
  end
  if bad then
    x:free()
    fail("%s: %s", where, bad)
  end
  local scaled <close> = x:mul(255)
  x:free()
  local rounded <close> = scaled:round()
  local bytes <close> = rounded:to("uint8")
  return bytes:reshape { count, 1, 28, 28 }, tensor.new(labels, "int64")
end

local function read_split(dir, name, files)
  local images, labels, writer_of = {}, {}, {}
  local writers, seen = {}, {}
  for _, path in ipairs(files) do
    local t = read_json(path)
    for i, user in ipairs(t.users) do
      if type(user) ~= "string" then fail("%s: users[%d] is not a string", path, i) end
      local count = t.num_samples[i]
      if math.type(count) == nil or count ~= math.floor(count) or count < 0 then
        fail("%s: num_samples[%d] is not a count", path, i)
      end
      count = math.tointeger(count)
      if count > 0 then
        local x, y = user_tensors(path, user, t.user_data[user], count)
        images[#images + 1], labels[#labels + 1] = x, y
        writer_of[#images] = user
        if not seen[user] then
          seen[user] = true
          writers[#writers + 1] = user
        end
      end
    end
  end
  if #images == 0 then fail("%s/%s: no samples", dir, name) end
  table.sort(writers)
  local id = {}
  for i, w in ipairs(writers) do id[w] = i - 1 end
  local groups = {}
  for k, x in ipairs(images) do
    groups[k] = tensor.full({ x:size(0) }, id[writer_of[k]], "int64")
  end
  local function cat(list)
    local t = #list == 1 and list[1]:clone() or tensor.cat(list)
    for _, v in ipairs(list) do v:free() end
    return t
  end
  return { images = cat(images), labels = cat(labels), groups = cat(groups) }, writers
end

local warned
local function warn(fmt, ...)
  if warned then return end   -- once per process: a full disk would say the same for each split
  warned = true
  io.stderr:write("dpy-lua: warning: femnist: ", string.format(fmt, ...), "\n")
end

-- The cache's key: the split's folder and each JSON file's name, size and mtime (in ns).
local function cache_key(where, files)
  local key = { "dpy-lua femnist cache 1", where }
  for _, path in ipairs(files) do
    local stamp, err = core.stamp(path)
    if not stamp then fail("%s", err) end
    key[#key + 1] = path:match("[^/]*$") .. ": " .. stamp
  end
  return table.concat(key, "\n")
end

-- Removes the temporary files of file's writes that killed processes left (a write takes seconds:
-- one an hour old is no one's).
local function remove_stale(file)
  local dir, base = file:match("^(.*)/([^/]*)$")
  local dirs, names = core.list_dir(dir)
  if not dirs then return end
  for _, name in ipairs(names) do
    local stamp = name:sub(1, #base + 5) == base .. ".tmp." and core.stamp(dir .. "/" .. name)
    local mtime = stamp and tonumber(stamp:match("mtime (%d+)"))
    if mtime and mtime < os.time() - 3600 then os.remove(dir .. "/" .. name) end
  end
end

-- The split's tensors and writers: from the dataset cache when it was made from the split's JSON
-- files as they are now, else parsed, and then written there for the next process (a cache that
-- cannot be read, or written, is said once, and the JSON is parsed).
local function cached_split(dir, name)
  local files = json_files(dir .. "/" .. name)
  local cache = data.cache_dir()
  if not cache then return read_split(dir, name, files) end
  local where = paths.absolute(dir .. "/" .. name)
  local key = cache_key(where, files)   -- before the parse: a file changed meanwhile is parsed again next time
  local file = string.format("%s/femnist-%s-%s", cache, name, core.hash(where))
  local t, meta = core.cache_read(file, key)
  if t then
    local ok, writers = pcall(cjson.decode, meta)
    if ok and type(writers) == "table" and t.images and t.labels and t.groups then return t, writers end
    for _, v in pairs(t) do v:free() end
    meta = file .. ": corrupt (not the arrays and writers of a split)"
  end
  if meta then warn("ignoring the cache: %s; parsing %s", meta, where) end
  local writers
  t, writers = read_split(dir, name, files)
  remove_stale(file)
  local ok, err = core.cache_write(file, key, cjson.encode(writers), t)
  if not ok then warn("not cached (%s): every process parses the JSON files again", err) end
  return t, writers
end

local function split(dir, train)
  return data.shared("femnist\0" .. dir .. (train and "\0train" or "\0test"), function()
    local t, writers = cached_split(dir, train and "train" or "test")
    local info = { writers = writers }
    if train then
      info.mean, info.std = core.channel_stats(t.images)
    else
      local _, tr = split(dir, true)
      info.mean, info.std = tr.mean, tr.std
    end
    return t, info
  end)
end

local ALLOWED = { train = true }
for k in pairs(M.options) do ALLOWED[k] = true end

--- femnist.load{dir, mean, std, train = true} -> dataset with groups (the writers)
function M.load(o)
  options.check(o, ALLOWED, "femnist", 2)
  if type(o.dir) ~= "string" then fail("option 'dir' is required: %s", HOW) end
  local t, info = split(o.dir, o.train ~= false)
  return { name = "femnist", images = t.images, labels = t.labels, groups = t.groups,
           group_names = info.writers, classes = M.CLASSES, mean = o.mean or info.mean,
           std = o.std or info.std, shape = { 1, 28, 28 } }
end

M.spec = data.component { name = "femnist", options = M.options, load = M.load,
  doc = "FEMNIST in LEAF's JSON layout, grouped by writer; ctx.train selects the split" }

return M
