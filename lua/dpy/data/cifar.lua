--- dpy.data.cifar: CIFAR-10 and CIFAR-100 read from their binary or Python (pickle) files, for
-- data.cifar10 and data.cifar100 (see dpy.data), which load this module when first called.
local core = require "dpy.data.core"
local tensor = require "dpy.tensor"
local options = require "dpy.options"
local data = require "dpy.data"
local exists = require("dpy.paths").exists

local M = {}

-- Each CIFAR in its two layouts: the binary version and the Python (pickle) one; files[split]
-- are the split's batches, sub the folder the archive unpacks to.
local CIFAR = {
  cifar10 = {
    binary = { sub = "cifar-10-batches-bin", test = { "test_batch.bin" }, train = {} },
    python = { sub = "cifar-10-batches-py", test = { "test_batch" }, train = {} },
  },
  cifar100 = {
    binary = { sub = "cifar-100-binary", train = { "train.bin" }, test = { "test.bin" } },
    python = { sub = "cifar-100-python", train = { "train" }, test = { "test" } },
  },
}
for i = 1, 5 do
  CIFAR.cifar10.binary.train[i] = string.format("data_batch_%d.bin", i)
  CIFAR.cifar10.python.train[i] = string.format("data_batch_%d", i)
end

-- The folder and format of a CIFAR split: format "binary", "python" or "auto" (the first of
-- dir, dir/<binary folder>, dir/<python folder> holding the split's first batch, binary first).
local function cifar_layout(name, opts, default_dir, split)
  local format = opts.format or "auto"
  if format ~= "auto" and format ~= "binary" and format ~= "python" then
    error(string.format("data.%s: format must be 'auto', 'binary' or 'python', got %s", name,
                        tostring(format)), 4)   -- past read_cifar and cifar10: the caller's line
  end
  local dir = opts.dir or default_dir
  local formats = format == "auto" and { "binary", "python" } or { format }
  local tried = {}
  for _, where in ipairs { "", "sub" } do
    for _, f in ipairs(formats) do
      local layout = CIFAR[name][f]
      local d = where == "" and dir or dir .. "/" .. layout.sub
      if exists(d .. "/" .. layout[split][1]) then return d, f, layout[split] end
      tried[#tried + 1] = (where == "" and "" or layout.sub .. "/") .. layout[split][1]
    end
  end
  error(data.missing(name, table.concat(tried, " or "), dir, opts), 0)
end

-- Reads the split's batches in one of the two layouts: images, labels (uint8, read-only), each
-- batch's labels checked to be among classes.
local function read_cifar(name, opts, default_dir, classes, label_bytes, label_index, label_key)
  local dir, format, files = cifar_layout(name, opts, default_dir, opts.train == false and "test" or "train")
  local images, labels = {}, {}
  for i, file in ipairs(files) do
    local path = dir .. "/" .. file
    if not exists(path) then error(data.missing(name, file, dir, opts), 0) end
    local x, y
    if format == "python" then
      x, y = core.read_cifar_py(path, label_key)
    else
      x, y = core.read_cifar(path, label_bytes, label_index)
    end
    if not x then error(y, 0) end
    data.check_labels(y, classes, path)
    images[i], labels[i] = x, y
  end
  if #files == 1 then return images[1], labels[1] end
  return tensor.cat(images), tensor.cat(labels)
end

--- data.cifar10{dir, train = true, format = "auto"}: the binary version (data_batch_1.bin ...
-- test_batch.bin) or the Python one (data_batch_1 ... test_batch, what torchvision downloads);
-- "auto" looks in dir and in its cifar-10-batches-bin/ and cifar-10-batches-py/ folders.
function M.cifar10(opts)
  opts = opts or {}
  options.check(opts, { dir = true, train = true, format = true }, "data.cifar10", 2)
  local images, labels = read_cifar("cifar10", opts, data.CIFAR10_DIR, 10, 1, 0, "labels")
  return { name = "cifar10", images = images, labels = labels, classes = 10,
           mean = { 0.4914, 0.4822, 0.4465 }, std = { 0.2470, 0.2435, 0.2616 }, shape = { 3, 32, 32 } }
end

--- data.cifar100{dir, train = true, label = "fine" | "coarse", format = "auto"}: the binary
-- version (train.bin, test.bin) or the Python one (train, test)
function M.cifar100(opts)
  opts = opts or {}
  options.check(opts, { dir = true, train = true, label = true, format = true }, "data.cifar100", 2)
  local coarse = opts.label == "coarse"
  if opts.label ~= nil and not coarse and opts.label ~= "fine" then
    error("data.cifar100: label must be 'fine' or 'coarse'", 2)
  end
  local classes = coarse and 20 or 100
  local images, labels = read_cifar("cifar100", opts, data.CIFAR100_DIR, classes, 2, coarse and 0 or 1,
                                    coarse and "coarse_labels" or "fine_labels")
  return { name = "cifar100", images = images, labels = labels, classes = classes,
           mean = { 0.5071, 0.4865, 0.4409 }, std = { 0.2673, 0.2564, 0.2762 }, shape = { 3, 32, 32 } }
end

return M
