--- The image_folder dataset: root/<class>/<file> images (PNG or JPEG), in torchvision's
-- ImageFolder layout and order: classes are the sorted subfolder names of root (class i is the
-- i-th, 0-based); each class folder is walked as sorted(os.walk(...)) walks it (subfolders
-- included) and its files ending in .png, .jpg or .jpeg (any case) are taken in byte order;
-- other files are skipped. Every image must have one size: the size option, else the first
-- image's. The test split is test_dir (the same class names), or a seeded fraction held out of
-- each class of root. mean and std default to the training split's per-channel statistics.
local data = require "dpy.data"
local core = require "dpy.data.core"
local tensor = require "dpy.tensor"
local random = require "dpy.random"
local options = require "dpy.options"

local M = {}

local EXTENSIONS = { png = true, jpg = true, jpeg = true }
local MAX_DEPTH = 32   -- a link cycle under a class folder would otherwise never end

M.options = {
  root = { type = "path", doc = "the training images: root/<class>/<file>.png|jpg" },
  test_dir = { type = "path", doc = "the test images, in class folders named as root's (default: "
                                    .. "a held-out fraction of root)" },
  -- no schema default: it would collide with test_dir; 0.1 applies only without test_dir
  test_fraction = { type = "number", above = 0, below = 1,
                    doc = "without test_dir: the fraction of each class held out of root for testing "
                          .. "(default 0.1)" },
  split_seed = { type = "integer", default = 0, doc = "the seed of the held-out choice" },
  channels = { type = "integer", one_of = { 1, 3 }, default = 3,
               doc = "1: grey (PIL's convert('L') luma), 3: RGB (grey images replicated)" },
  size = { type = "list", of = "integer", min = 1,
           doc = "{height, width} every image must have (default: the first image's)" },
  mean = { type = "list", of = "number", check = data.unit_scale,
           doc = "per-channel mean (default: the training split's)" },
  std = { type = "list", of = "number", above = 0, check = data.unit_scale,
          doc = "per-channel standard deviation (default: the training split's)" },
}

local function fail(fmt, ...) error("image_folder: " .. string.format(fmt, ...), 0) end

local function is_image(name)
  local ext = name:match("%.([^.]+)$")
  return ext ~= nil and EXTENSIONS[ext:lower()] == true
end

local function list(dir, option)
  local dirs, files = core.list_dir(dir)
  if not dirs then
    fail("%s (option '%s': a folder of class folders, as torchvision's ImageFolder reads)", files, option)
  end
  return dirs, files
end

-- The image files under dir in torchvision's order: sorted(os.walk(dir)) sorts the folders by
-- their path strings, and each folder's files are sorted.
local function walk(dir, option)
  local folders, stack = {}, { { dir, 0 } }
  while #stack > 0 do
    local d, depth = table.unpack(table.remove(stack))
    if depth > MAX_DEPTH then fail("%s: folders nested deeper than %d (a link cycle?)", d, MAX_DEPTH) end
    folders[#folders + 1] = d
    for _, sub in ipairs((list(d, option))) do stack[#stack + 1] = { d .. "/" .. sub, depth + 1 } end
  end
  table.sort(folders)
  local paths = {}
  for _, d in ipairs(folders) do
    for _, f in ipairs(select(2, list(d, option))) do
      if is_image(f) then paths[#paths + 1] = d .. "/" .. f end
    end
  end
  return paths
end

-- paths and 0-based labels of the images under dir's class folders; classes (root's) fixes the
-- labels, and a class folder that root lacks is refused.
local function files_of(dir, classes, option)
  local label_of = {}
  for i, c in ipairs(classes) do label_of[c] = i - 1 end
  local paths, labels = {}, {}
  for _, c in ipairs((list(dir, option))) do
    local label = label_of[c]
    if not label then
      fail("%s/%s: class folder '%s' is not among root's classes (%s)", dir, c, c, table.concat(classes, ", "))
    end
    local found = walk(dir .. "/" .. c, option)
    if #found == 0 then fail("%s/%s: no .png, .jpg or .jpeg file for class '%s'", dir, c, c) end
    for _, p in ipairs(found) do
      paths[#paths + 1] = p
      labels[#labels + 1] = label
    end
  end
  if #paths == 0 then fail("%s: no class folder holds an image (option '%s')", dir, option) end
  return paths, labels
end

-- Without test_dir: round(fraction * n) images of each class, a seeded choice, are the test
-- split; both splits keep the folder order.
local function hold_out(paths, labels, fraction, seed, want_train)
  local rng = random.new(seed)
  local chosen = {}
  local by_class = {}
  for i, y in ipairs(labels) do
    by_class[y] = by_class[y] or {}
    table.insert(by_class[y], i)
  end
  local ys = {}
  for y in pairs(by_class) do ys[#ys + 1] = y end
  table.sort(ys)
  for _, y in ipairs(ys) do
    local idx = rng:shuffle(table.move(by_class[y], 1, #by_class[y], 1, {}))
    for j = 1, math.floor(fraction * #idx + 0.5) do chosen[idx[j]] = true end
  end
  local p, l = {}, {}
  for i = 1, #paths do
    if (chosen[i] == nil) == want_train then
      p[#p + 1] = paths[i]
      l[#l + 1] = labels[i]
    end
  end
  if #p == 0 then
    fail("test_fraction %g of %d images leaves the %s split empty", fraction, #paths,
         want_train and "training" or "test")
  end
  return p, l
end

local function check_opts(o)
  if type(o.root) ~= "string" then
    fail("option 'root' (the folder of class folders) is required")
  end
  if o.test_dir ~= nil and o.test_fraction ~= nil then
    fail("give test_dir or test_fraction, not both")
  end
  local channels = o.channels or 3
  if channels ~= 1 and channels ~= 3 then fail("channels must be 1 or 3, got %s", tostring(channels)) end
  local fraction = o.test_fraction or 0.1
  if type(fraction) ~= "number" or fraction <= 0 or fraction >= 1 then
    fail("test_fraction must be a number in (0, 1), got %s", tostring(fraction))
  end
  options.check_type(o.split_seed or 0, "integer", "image_folder: split_seed", 3)
  if o.size ~= nil then
    local s = o.size
    if type(s) ~= "table" or #s ~= 2 or math.type(s[1]) ~= "integer" or math.type(s[2]) ~= "integer"
       or s[1] < 1 or s[2] < 1 then
      fail("size must be {height, width}, two positive integers")
    end
  end
  for _, k in ipairs { "mean", "std" } do
    local v = o[k]
    if v ~= nil and (type(v) ~= "table" or #v ~= channels) then
      fail("%s must list %d number(s), one per channel", k, channels)
    end
  end
  return channels, fraction
end

local function decode(paths, channels, size, option)
  local h, w
  if size then
    h, w = size[1], size[2]
  else
    local pw, ph = core.image_probe(paths[1])
    if not pw then fail("%s", ph) end
    h, w = ph, pw
  end
  local images, err = core.read_images(paths, channels, h, w)
  if not images then
    if not size and err:match("expected %d+x%d+$") then
      err = err .. string.format(" (the size of the first image, %s; the option 'size' sets one)", paths[1])
    end
    fail("%s (option '%s')", err, option)
  end
  return images, { h, w }
end

-- One split, decoded once per process (data.shared); info holds the classes, the size and the
-- training split's statistics.
local function split(o, train)
  local channels, fraction = check_opts(o)
  local key = table.concat({ "image_folder", o.root, o.test_dir or "", string.format("%.17g", fraction),
                             tostring(o.split_seed or 0), tostring(channels),
                             o.size and (o.size[1] .. "x" .. o.size[2]) or "" }, "\0")
  return data.shared(key .. (train and "\0train" or "\0test"), function()
    local classes = list(o.root, "root")
    if #classes == 0 then
      fail("%s: no class folders (option 'root': root/<class>/<file>.png|jpg)", o.root)
    end
    local paths, labels
    local size = o.size
    if train or not o.test_dir then
      paths, labels = files_of(o.root, classes, "root")
      if not o.test_dir then paths, labels = hold_out(paths, labels, fraction, o.split_seed or 0, train) end
    else
      paths, labels = files_of(o.test_dir, classes, "test_dir")
    end
    local info = { classes = classes }
    if not train then   -- the test split takes the training split's size and statistics
      local _, t = split(o, true)
      size, info.mean, info.std = t.size, t.mean, t.std
    end
    local images
    images, info.size = decode(paths, channels, size, train and "root" or (o.test_dir and "test_dir" or "root"))
    if train then info.mean, info.std = core.channel_stats(images) end
    return { images = images, labels = tensor.new(labels, "int64") }, info
  end)
end

--- image_folder.load{root, test_dir, test_fraction = 0.1, split_seed = 0, channels = 3, size,
-- mean, std, train = true} -> dataset (class_names lists the class folders)
local ALLOWED = { train = true }
for k in pairs(M.options) do ALLOWED[k] = true end

function M.load(o)
  options.check(o, ALLOWED, "image_folder", 2)
  local t, info = split(o, o.train ~= false)
  local channels = o.channels or 3
  return { name = "image_folder", images = t.images, labels = t.labels, classes = #info.classes,
           class_names = info.classes, mean = o.mean or info.mean, std = o.std or info.std,
           shape = { channels, info.size[1], info.size[2] } }
end

M.spec = data.component { name = "image_folder", options = M.options, load = M.load,
  doc = "root/<class>/<file>.png|jpg (torchvision's ImageFolder); ctx.train selects the split" }

return M
