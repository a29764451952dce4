--- dpy.data: datasets read from their real file formats, and batch loaders.
-- A dataset is { images = N x C x H x W (uint8, or float32 from NumPy / PyTorch files), labels
-- (uint8 or int64) N, classes, mean, std, name, shape }; its tensors are read-only and shared
-- by every node of the process (loaded once). A dataset with a natural partition (writers,
-- hospitals) also has groups, an int64 N tensor of group ids >= 0 (the "natural" partitioner's
-- input), and may name them: group_names[id + 1].
local core = require "dpy.data.core"
local tensor = require "dpy.tensor"
local options = require "dpy.options"
local cjson = require("cjson").new()

local M = {}

M.FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

--- Where each built-in dataset comes from: the end of the message for a missing file.
M.SOURCES = {
  fashion_mnist = "install Debian's dataset-fashion-mnist, or put the four *-ubyte.gz files of "
    .. "https://github.com/zalandoresearch/fashion-mnist there",
  mnist = "put the four *-ubyte.gz files of https://ossci-datasets.s3.amazonaws.com/mnist/ (the "
    .. "copy torchvision uses of http://yann.lecun.com/exdb/mnist/) there",
  cifar10 = "unpack cifar-10-binary.tar.gz or cifar-10-python.tar.gz of "
    .. "https://www.cs.toronto.edu/~kriz/cifar.html there",
  cifar100 = "unpack cifar-100-binary.tar.gz or cifar-100-python.tar.gz of "
    .. "https://www.cs.toronto.edu/~kriz/cifar.html there",
  numpy = "write it with numpy.savez(path, images=x, labels=y), or each array with numpy.save",
  torch = "write it with torch.save((images, labels), path) or torch.save({'images': x, "
    .. "'labels': y}, path)",
}

local exists = require("dpy.paths").exists

-- "(option dir = "x")", or "(option dir, default x)" when the default was used.
local function dir_option(opts, dir)
  if opts.dir then return string.format("option dir = %q", opts.dir) end
  return string.format("option dir, default %q", dir)
end

--- data.missing(name, what, dir, opts) -> the message for a dataset whose files are not there:
-- which file, which option, where to get it (the readers of dpy.data.* use it too).
function M.missing(name, what, dir, opts)
  return string.format("dataset %s: no %s in %s (%s); %s", name, what, dir, dir_option(opts, dir),
                       M.SOURCES[name])
end

-- The idx file of base in dir, gzipped or not.
local function idx_path(name, dir, base, opts)
  for _, p in ipairs { dir .. "/" .. base, dir .. "/" .. base .. ".gz" } do
    if exists(p) then return p end
  end
  return nil, M.missing(name, base .. " or " .. base .. ".gz", dir, opts)
end

--- data.cache_dir() -> where gzipped idx files are kept decompressed, to be mapped (nil: read
-- into memory instead): $DPY_CACHE_DIR ("" for none), else $XDG_CACHE_HOME/dpy-lua, else
-- ~/.cache/dpy-lua
function M.cache_dir()
  local dir = os.getenv("DPY_CACHE_DIR")
  if dir then return dir ~= "" and dir or nil end
  local xdg, home = os.getenv("XDG_CACHE_HOME"), os.getenv("HOME")
  if xdg and xdg ~= "" then return xdg .. "/dpy-lua" end
  return home and home ~= "" and home .. "/.cache/dpy-lua" or nil
end

local function check_labels(labels, classes, file, note)
  local lo <close> = labels:min()
  local hi <close> = labels:max()
  if lo:item() >= 0 and hi:item() < classes then return end
  local outside <close> = hi:item() >= classes and labels:ge(classes) or labels:lt(0)
  local flags <close> = outside:to("uint8")
  local first <close> = flags:argmax()   -- the first outside: argmax takes the first of equal maxima
  local at = first:item()
  local bad <close> = labels:narrow(0, at, 1)
  error(string.format("%s: label %d at index %d is outside 0..%d%s", file, bad:item(), at, classes - 1,
                      note and " (" .. note .. ")" or ""), 0)
end

--- data.check_labels(labels, classes, file [, note]): raises "file: label 11 at index 3 is outside
-- 0..9" (and note) unless every label is a class; one min and one max, so a reader checks what it
-- read, and a bad label is not first met by cross_entropy in a node, naming no file. Read-only
-- labels (a file's, shared by the process's nodes) are checked once per process: every node loads
-- its datasets, and the check cost a node 0.27 ms of its start.
function M.check_labels(labels, classes, file, note)
  if labels:numel() == 0 then return end
  if labels:is_readonly() then
    -- the entry keeps the labels, so their address (the key) cannot name other bytes later; a
    -- check that raises keeps nothing, and the next load raises again
    local t = M.shared(string.format("labels %s %s %d", core.storage(labels), labels:dtype(), classes),
                       function()
                         check_labels(labels, classes, file, note)
                         return { labels = labels }
                       end)
    t.labels:free()
    return
  end
  check_labels(labels, classes, file, note)
end

local function read_idx(name, dir, base, opts)
  local path, err = idx_path(name, dir, base, opts)
  if not path then error(err, 0) end
  local t, rerr = core.read_idx(path, M.cache_dir())
  if not t then error(rerr, 0) end
  return t, path
end

-- MNIST and Fashion-MNIST share the idx layout and file names. Every node of a process loads the
-- same split: it is found and checked once (looking for each file, plain then gzipped, was 12
-- system calls of a node's start), and stays for the process, as read_idx's files do.
local function idx_dataset(name, default_dir, mean, std)
  return function(opts)
    opts = opts or {}
    options.check(opts, { dir = true, train = true }, "data." .. name, 2)
    local dir = opts.dir or default_dir
    local prefix = opts.train == false and "t10k" or "train"
    local t = M.shared(string.format("idx\0%s\0%s", dir, prefix), function()
      local images <close> = read_idx(name, dir, prefix .. "-images-idx3-ubyte", opts)
      local labels, path = read_idx(name, dir, prefix .. "-labels-idx1-ubyte", opts)
      if images:dim() ~= 3 or labels:dim() ~= 1 or images:size(0) ~= labels:size(0) then
        error(string.format("%s: images %s and labels %s do not match", dir,
                            table.concat(images:size(), "x"), table.concat(labels:size(), "x")), 0)
      end
      M.check_labels(labels, 10, path)
      return { images = images:unsqueeze(1), labels = labels }
    end)
    return { name = name, images = t.images, labels = t.labels, classes = 10, mean = { mean }, std = { std },
             shape = { 1, t.images:size(2), t.images:size(3) } }
  end
end

M.MNIST_DIR = "/usr/share/datasets/mnist"
--- data.fashion_mnist{dir = "/usr/share/datasets/fashion-mnist", train = true}
M.fashion_mnist = idx_dataset("fashion_mnist", M.FASHION_MNIST_DIR, 0.2860, 0.3530)
--- data.mnist{dir = "/usr/share/datasets/mnist", train = true}
M.mnist = idx_dataset("mnist", M.MNIST_DIR, 0.1307, 0.3081)

M.CIFAR10_DIR = "/usr/share/datasets/cifar-10-batches-bin"
M.CIFAR100_DIR = "/usr/share/datasets/cifar-100-binary"

--- data.cifar10{dir, train = true, format = "auto"}: the binary version (data_batch_1.bin ...
-- test_batch.bin) or the Python one (data_batch_1 ... test_batch, what torchvision downloads);
-- "auto" looks in dir and in its cifar-10-batches-bin/ and cifar-10-batches-py/ folders.
-- The readers of CIFAR and of arrays lie in dpy.data.cifar and dpy.data.arrays, loaded when first
-- called: a node of another dataset does not load them (16 KiB of its Lua heap).
function M.cifar10(opts) return require("dpy.data.cifar").cifar10(opts) end

--- data.cifar100{dir, train = true, label = "fine" | "coarse", format = "auto"}: the binary
-- version (train.bin, test.bin) or the Python one (train, test)
function M.cifar100(opts) return require("dpy.data.cifar").cifar100(opts) end

--- data.unit_scale(list) -> nil, or what is wrong: a mean or std option for uint8 images, which the
-- loader scales to [0, 1] before normalizing; an entry above 1 is on the 0..255 scale (every input
-- would be nearly the same number). The schema check of the uint8 datasets' mean and std.
function M.unit_scale(v)
  for i, x in ipairs(type(v) == "table" and v or {}) do
    if type(x) == "number" and x > 1 then
      return string.format("must be on the [0, 1] scale that uint8 pixels are normalized on, got %g at [%d] "
                           .. "(%g / 255 = %.4f)", x, i, x, x / 255)
    end
  end
end

--- data.array_options(kind) -> the option schema of data.numpy ("numpy") and data.torch
-- ("torch"), which their dataset components declare too
function M.array_options(kind) return require("dpy.data.arrays").options(kind) end

--- data.numpy{dir, train = true, train_file = "train.npz", test_file = "test.npz", train_images,
-- train_labels, test_images, test_labels, images, labels, layout = "auto", classes, mean, std}:
-- .npz archives (numpy.savez, savez_compressed) or .npy files (numpy.save); see array_options
function M.numpy(opts) return require("dpy.data.arrays").numpy(opts) end

--- data.torch{dir, train = true, train_file = "train.pt", test_file = "test.pt", ...}: files of
-- torch.save (a tensor, a tuple or list (images, labels), or a dict of them), as data.numpy
function M.torch(opts) return require("dpy.data.arrays").torch(opts) end

--- data.shared(key, build) -> tensors, info: the first call for key in the process runs
-- build() -> {name = dpy.Tensor, ...}, info (a table of plain values: strings, numbers, lists) and
-- keeps both; every call gets read-only shares of the tensors and a copy of info. Nodes building
-- the same key meanwhile wait for the first, then share its tensors (lua/dpy/datasets use it).
function M.shared(key, build)
  local tensors, meta = core.shared(key, function()
    local t, info = build()
    return t, cjson.encode(info or {})
  end)
  return tensors, cjson.decode(meta)
end

--- The most bytes data.decoded keeps for one dataset (float32 values).
M.DECODED_MAX_BYTES = 1 << 30

--- data.decoded(ds [, n]) -> x, y: the first n samples of ds (default: all) as a loader's batches
-- give them (float32, normalized with ds.mean and ds.std; int64 labels), decoded once per process
-- and shared read-only by every node that asks (evaluation: the test set). nil when ds's tensors
-- are not read-only (a node's own, as data.relabel's labels: nothing to share) or x would pass
-- M.DECODED_MAX_BYTES.
function M.decoded(ds, n)
  local images, labels = ds.images, ds.labels
  n = n or images:size(0)
  if not (images:is_readonly() and labels:is_readonly()) then return nil end
  if n < 1 or n > images:size(0) then
    error(string.format("data.decoded: n must be in 1..%d, got %s", images:size(0), tostring(n)), 2)
  end
  if n * (images:numel() // images:size(0)) * 4 > M.DECODED_MAX_BYTES then return nil end
  local stats = {}
  for i, m in ipairs(ds.mean or {}) do stats[#stats + 1] = string.format("%.17g/%.17g", m, ds.std[i]) end
  local key = string.format("decoded %s %s %s %s %s %d", core.storage(images), images:dtype(),
                            table.concat(images:size(), "x"), core.storage(labels), table.concat(stats, ","), n)
  local t = M.shared(key, function()
    local first <close> = tensor.arange(n)
    local x, y = core.batch(images, labels, first, ds.mean, ds.std)
    -- the entry keeps its sources, so their addresses (the key) cannot name other bytes later
    return { x = x, y = y, images = images, labels = labels }
  end)
  t.images:free()
  t.labels:free()
  return t.x, t.y
end

--- data.size(dataset) -> number of samples
function M.size(ds) return ds.images:size(0) end

--- data.relabel(ds, map) -> a dataset sharing ds's images whose labels are map[label]; map is a
-- Lua list of ds.classes new labels, index 0-based ({[0] = 9, 8, ...}) or an int64 tensor.
function M.relabel(ds, map)
  local t = map
  if not tensor.is_tensor(map) then
    local values = {}
    for c = 0, ds.classes - 1 do
      local v = map[c]
      if math.type(v) ~= "integer" or v < 0 or v >= ds.classes then
        error(string.format("data.relabel: map[%d] must be a class in 0..%d, got %s", c,
                            ds.classes - 1, tostring(v)), 2)
      end
      values[c + 1] = v
    end
    t = tensor.new(values, "int64")
  end
  local labels = ds.labels:to("int64")
  local copy = setmetatable({ labels = t:index_select(0, labels) }, { __index = ds })
  labels:free()
  if t ~= map then t:free() end
  return copy
end

-- {==== loader ====}

local Loader = {}
Loader.__index = Loader

-- A loader's sample indices: a Lua list of integers or a 1-D int64/int32 tensor (default all),
-- each a sample of the dataset, checked once here rather than by torch at some later batch.
local function loader_indices(ds, indices)
  local n = ds.images:size(0)
  if indices == nil then return tensor.arange(n) end
  local function fail(fmt, ...) error("data.loader: " .. string.format(fmt, ...), 4) end
  if type(indices) == "table" and not tensor.is_tensor(indices) then
    for i = 1, #indices do
      local v = indices[i]
      if math.type(v) ~= "integer" then fail("indices[%d] must be an integer, got %s", i, tostring(v)) end
    end
    indices = tensor.new(indices, "int64")
  elseif not tensor.is_tensor(indices) then
    fail("indices must be a 1-D integer tensor or a Lua list, got a %s", type(indices))
  elseif indices:dim() ~= 1 then
    fail("indices must be a 1-D integer tensor or a Lua list, got a %d-D tensor", indices:dim())
  elseif indices:dtype() ~= "int64" and indices:dtype() ~= "int32" then
    fail("indices must be a 1-D integer tensor or a Lua list, got a %s tensor", indices:dtype())
  end
  if indices:numel() > 0 then
    local lo <close> = indices:min()
    local hi <close> = indices:max()
    if lo:item() < 0 or hi:item() >= n then
      for i, v in ipairs(indices:totable()) do
        if v < 0 or v >= n then
          fail("indices[%d] is %d, where a sample of the dataset's 0..%d belongs", i, v, n - 1)
        end
      end
    end
  end
  return indices
end

--- data.loader(dataset, {batch_size = 32, indices = int64 tensor or list (default all), shuffle = true,
-- drop_last = false, normalize = true, generator = dpy.Generator}) -> loader
-- loader:next() -> x, y (float32 normalized images, int64 labels), starting a new epoch (and a
-- new shuffle) when one ends; loader:epoch() iterates one epoch; #loader is batches per epoch.
function M.loader(ds, opts)
  opts = opts or {}
  options.check(opts, { batch_size = true, indices = true, shuffle = true, drop_last = true,
                        normalize = true, generator = true }, "data.loader", 2)
  local self = setmetatable({
    ds = ds,
    batch_size = opts.batch_size or 32,
    indices = loader_indices(ds, opts.indices),
    shuffle = opts.shuffle ~= false,
    drop_last = opts.drop_last == true,
    gen = opts.generator or tensor.default_generator(),
    pos = 0,
    epochs = 0,
  }, Loader)
  options.check_type(self.batch_size, "integer", "data.loader: batch_size", 2)
  if self.batch_size < 1 then error("data.loader: batch_size must be >= 1", 2) end
  if opts.normalize ~= false then self.mean, self.std = ds.mean, ds.std end
  self.n = self.indices:numel()
  if self.n == 0 then error("data.loader: no samples (empty indices)", 2) end
  if self.drop_last and self.n < self.batch_size then
    error(string.format("data.loader: %d samples make no full batch of %d", self.n,
                        self.batch_size), 2)
  end
  return self
end

function Loader:__len()
  return self.drop_last and self.n // self.batch_size or (self.n + self.batch_size - 1) // self.batch_size
end

function Loader:_start_epoch()
  if self.order and self.order ~= self.indices then self.order:free() end
  if self.shuffle then
    local perm <close> = tensor.randperm(self.n, { generator = self.gen })
    self.order = self.indices:index_select(0, perm)
  else
    self.order = self.indices
  end
  self.pos = 0
  self.epochs = self.epochs + 1
end

--- loader:next() -> x, y, and true when this batch ends an epoch
function Loader:next()
  if not self.order or self.pos >= #self * self.batch_size or self.pos >= self.n then
    self:_start_epoch()
  end
  local len = math.min(self.batch_size, self.n - self.pos)
  local idx <close> = self.order:narrow(0, self.pos, len)
  self.pos = self.pos + len
  local x, y = core.batch(self.ds.images, self.ds.labels, idx, self.mean, self.std)
  local last = self.pos >= #self * self.batch_size or self.pos >= self.n
  return x, y, last
end

--- for x, y in loader:epoch() do ... end: one full epoch from its start
function Loader:epoch()
  self.order = nil
  local done = false
  return function()
    if done then return nil end
    local x, y, last = self:next()
    done = last
    return x, y
  end
end

--- data.component{ name, doc, options, load } -> the registered spec of a dataset component
-- whose new(cfg, ctx) calls load with the options given and train = ctx.train ~= false (the
-- contract every built-in dataset follows).
function M.component(spec)
  return require("dpy.registry").register {
    kind = "dataset", name = spec.name, doc = spec.doc, options = spec.options,
    new = function(cfg, ctx)
      local o = { train = ctx.train ~= false }
      for k in pairs(spec.options) do o[k] = cfg[k] end
      return spec.load(o)
    end,
  }
end

return M
