-- lua/dpy/datasets: NumPy, torch.save and CIFAR-pickle datasets on the fixtures of
-- tests/fixtures/datasets (their bytes written by make_fixtures.py from each format's
-- documentation), files written here, hostile files, and the messages for missing ones.
local tensor = require "dpy.tensor"
local data = require "dpy.data"
local registry = require "dpy.registry"

local F = REPO .. "/tests/fixtures/datasets"

-- the fixtures' values: uint8 element i is (7 i + 3) % 256, float32 element i is (i % 11) / 10
local function u8(i) return (7 * i + 3) % 256 end
local function f32(i) return (i % 11) / 10 end

local function copy_to(dir, src, name)
  write_file(dir .. "/" .. name, read_file(src))
end

local function close(a, b) return math.abs(a - b) < 1e-6 end

-- the same dtype, shape and values
local function equal(a, b)
  if a:dtype() ~= b:dtype() or table.concat(a:size(), "x") ~= table.concat(b:size(), "x") then
    return false
  end
  return a:eq(b):all():item()
end

describe("float32 images", function()
  it("are batched as they are: scaled to [0, 1] only when they are uint8", function()
    local images = tensor.new({ 0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 4.0, 5.0 }):reshape(2, 1, 2, 2)
    local ds = { images = images, labels = tensor.new({ 0, 1 }, "int64"), classes = 2,
                 mean = { 0.5 }, std = { 2 } }
    local x = data.loader(ds, { batch_size = 2, shuffle = false }):next()
    assert.is_true(close(x[0][0][0][1]:item(), (0.5 - 0.5) / 2))
    assert.is_true(close(x[1][0][1][1]:item(), (5.0 - 0.5) / 2))
  end)
end)

describe("numpy dataset", function()
  local dir = F .. "/numpy"

  it("reads .npz archives (stored and deflated) with their values, in N x C x H x W", function()
    local ds = data.numpy { dir = dir }
    assert.are.same({ 5, 3, 4, 2 }, ds.images:size())
    assert.are.equal("uint8", ds.images:dtype())
    assert.are.equal(u8(1 * 24 + 2 * 8 + 3 * 2 + 1), ds.images[1][2][3][1]:item())
    assert.are.same({ 3, 1, 4, 1, 5 }, ds.labels:totable())
    assert.are.equal("int64", ds.labels:dtype())
    assert.are.equal(6, ds.classes)
    assert.are.same({ 3, 4, 2 }, ds.shape)
    assert.is_true(ds.images:is_readonly() and ds.labels:is_readonly())
    -- mean and std per channel, over the training images on the [0, 1] scale, by hand
    for c = 0, 2 do
      local sum, sq = 0, 0
      for n = 0, 4 do
        for j = 0, 7 do
          local v = u8(n * 24 + c * 8 + j) / 255
          sum, sq = sum + v, sq + v * v
        end
      end
      assert.is_true(close(ds.mean[c + 1], sum / 40))
      assert.is_true(close(ds.std[c + 1], math.sqrt(sq / 40 - (sum / 40) ^ 2)))
    end
    -- test.npz: deflated, float32 N x H x W x C images (made N x C x H x W), labels 3 x 1
    local test = data.numpy { dir = dir, train = false }
    assert.are.same({ 3, 3, 4, 2 }, test.images:size())
    assert.are.equal("float32", test.images:dtype())
    for _, e in ipairs { { 0, 0, 0, 0 }, { 2, 1, 3, 1 }, { 1, 2, 0, 1 } } do
      local n, c, h, w = e[1], e[2], e[3], e[4]
      assert.is_true(close(test.images[n][c][h][w]:item(), f32(n * 24 + (h * 2 + w) * 3 + c)))
    end
    assert.are.same({ 2, 0, 5 }, test.labels:totable())
    assert.are.equal(6, test.classes)                 -- from the training split
    assert.are.same(ds.mean, test.mean)
  end)

  it("reads one .npy file per array, and both splits of one archive (Keras's mnist.npz)", function()
    local ds = data.numpy { dir = dir, train_images = "x_train.npy", train_labels = "y_train.npy" }
    assert.are.same({ 4, 1, 3, 3 }, ds.images:size())
    assert.are.equal(u8(2 * 9 + 4), ds.images[2][0][1][1]:item())
    assert.are.same({ 0, 1, 2, 1 }, ds.labels:totable())
    local keras = { dir = dir, train_file = "keras.npz", test_file = "keras.npz" }
    local train = data.numpy(keras)
    assert.are.same({ 2, 1, 2, 2 }, train.images:size())
    assert.are.same({ 7, 9 }, train.labels:totable())
    keras.train = false
    local test = data.numpy(keras)
    assert.are.same({ 9, 8, 7, 6 }, test.images:flatten():totable())
    assert.are.same({ 4 }, test.labels:totable())
    assert.are.equal(10, test.classes)
  end)

  -- A .npy file's bytes, as the NumPy format document describes them.
  local function npy(descr, shape, raw)
    local header = string.format("{'descr': '%s', 'fortran_order': False, 'shape': (%s,), }",
                                 descr, table.concat(shape, ", "))
    header = header .. string.rep(" ", (64 - (10 + #header + 1) % 64) % 64) .. "\n"
    return "\x93NUMPY\1\0" .. string.pack("<I2", #header) .. header .. raw
  end

  it("reads what the NumPy format document describes, written here byte by byte", function()
    local work = tmpdir()
    local px = {}
    for i = 1, 2 * 2 * 2 * 3 do px[i] = string.pack("<f", i / 8) end
    write_file(work .. "/x.npy", npy("<f4", { 2, 2, 2, 3 }, table.concat(px)))
    write_file(work .. "/y.npy", npy("<i8", { 2 }, string.pack("<i8<i8", 1, 0)))
    local ds = data.numpy { dir = work, train_images = "x.npy", train_labels = "y.npy",
                            layout = "nhwc", mean = { 0, 0, 0 }, std = { 1, 1, 1 } }
    -- NHWC element (n, h, w, c) is flat index ((n * 2 + h) * 2 + w) * 3 + c, value (index + 1) / 8
    assert.is_true(close(ds.images[1][2][0][1]:item(), (((1 * 2 + 0) * 2 + 1) * 3 + 2 + 1) / 8))
    local x = data.loader(ds, { batch_size = 2, shuffle = false }):next()
    assert.is_true(close(x[0][1][1][0]:item(), (((0 * 2 + 1) * 2 + 0) * 3 + 1 + 1) / 8))
  end)

  it("takes numpy.savez(file, x, y)'s unnamed arrays, arr_0 and arr_1, as images and labels", function()
    local src = data.numpy { dir = dir }
    local ds = data.numpy { dir = dir, train_file = "positional.npz" }
    assert.is_true(equal(ds.images, src.images))
    assert.is_true(equal(ds.labels, src.labels))
  end)

  it("asks for the layout when neither dim 1 nor the last holds 1 or 3 channels", function()
    local work = tmpdir()
    -- RGBA images N x H x W x 4 (or 4-channel N x C x H x W: the shape alone cannot say)
    write_file(work .. "/x.npy", npy("|u1", { 2, 8, 8, 4 }, string.rep("\7", 2 * 8 * 8 * 4)))
    write_file(work .. "/y.npy", npy("<i8", { 2 }, string.pack("<i8<i8", 1, 0)))
    local o = { dir = work, train_images = "x.npy", train_labels = "y.npy" }
    assert.error_matches(function() data.numpy(o) end,
                         "x%.npy and .*/y%.npy: images are 2 x 8 x 8 x 4: layout 'auto' cannot tell their channels "
                         .. "%(neither dim 1 nor the last is 1 or 3%): give layout = 'nhwc' or 'nchw'")
    o.layout = "nhwc"
    assert.are.same({ 4, 8, 8 }, data.numpy(o).shape)
    o.layout = "nchw"
    assert.are.same({ 8, 8, 4 }, data.numpy(o).shape)
  end)

  it("says which file is missing, which option names it, and how to make it", function()
    local work = tmpdir()
    assert.error_matches(function() data.numpy { dir = work } end,
                         "dataset numpy: no file " .. work:gsub("%p", "%%%0") .. "/train%.npz %(option "
                         .. "train_file, default \"train%.npz\", dir = .-%); write it with numpy%.savez")
    assert.error_matches(function() data.numpy { dir = work, train_file = "a.npz" } end,
                         "option train_file = \"a%.npz\"")
    assert.error_matches(function() data.numpy {} end, "option dir is required")
    assert.error_matches(function() data.numpy { dir = dir, train_images = "x_train.npy" } end,
                         "train_images and train_labels go together")
    assert.error_matches(function() data.numpy { dir = dir, images = "pixels" } end,
                         "train%.npz: no member named pixels %(it holds: images, labels%)")
    assert.error_matches(function() data.numpy { dir = dir, layuot = "nchw" } end,
                         "unknown option 'layuot' %(did you mean 'layout'%?%)")
    assert.error_matches(function() data.numpy { dir = dir, layout = "chw" } end,
                         "option 'layout' must be one of \"auto\", \"nchw\", \"nhwc\"")
    assert.error_matches(function() data.numpy { dir = dir, classes = 3 } end,
                         "numpy/train%.npz: label 3 at index 0 is outside 0%.%.2 %(classes = 3%)")
    assert.error_matches(function() data.numpy { dir = dir, mean = { 0.5 } } end,
                         "mean must be a list of 3 numbers")
    assert.error_matches(function() data.numpy { dir = dir, std = { 1, 0, 1 } } end,
                         "std%[2%] must be a number > 0")
    -- uint8 pixels are normalized on [0, 1]: statistics on the 0..255 scale are refused
    assert.error_matches(function() data.numpy { dir = dir, mean = { 0.5, 125.3, 0.5 } } end,
                         "data%.numpy: mean for uint8 images must be on the %[0, 1%] scale that uint8 pixels "
                         .. "are normalized on, got 125%.3 at %[2%] %(125%.3 / 255 = 0%.4914%)")
    assert.error_matches(function() data.torch { dir = F .. "/torch", std = { 63 } } end,
                         "data%.torch: std for uint8 images must be on the %[0, 1%] scale")
  end)

  it("refuses truncated, corrupt and hostile files with a message", function()
    local work = tmpdir()
    local good = read_file(dir .. "/train.npz")
    for _, cut in ipairs { 0, 10, 100, #good // 2, #good - 22, #good - 1 } do
      write_file(work .. "/train.npz", good:sub(1, cut))
      assert.error_matches(function() data.numpy { dir = work } end, "train%.npz")
    end
    -- one flipped byte in the stored images: libzip's CRC check catches it
    local at = good:find("\x93NUMPY", 1, true) + 100
    write_file(work .. "/train.npz", good:sub(1, at - 1) .. string.char(good:byte(at) ~ 0xff)
                                     .. good:sub(at + 1))
    assert.error_matches(function() data.numpy { dir = work } end, "member images%.npy: corrupt member %(CRC error%)")
    local x = read_file(dir .. "/x_train.npy")
    write_file(work .. "/x.npy", x:sub(1, #x - 1))
    copy_to(work, dir .. "/y_train.npy", "y.npy")
    local split = { dir = work, train_images = "x.npy", train_labels = "y.npy" }
    assert.error_matches(function() data.numpy(split) end,
                         "x%.npy: the header promises 36 bytes of data %(4 x 3 x 3, |u1%) but the file holds 35")
    write_file(work .. "/x.npy", (x:gsub("%(4, 3, 3%)", "(9, 9, 9)")))
    assert.error_matches(function() data.numpy(split) end, "promises 729 bytes")
    write_file(work .. "/x.npy", (x:gsub("%(4, 3, 3%)", "(9999999999999, 99999999999)")))
    assert.error_matches(function() data.numpy(split) end, "the shape is too large")
    write_file(work .. "/x.npy", (x:gsub("False", "True ")))
    assert.error_matches(function() data.numpy(split) end, "Fortran order")
    write_file(work .. "/x.npy", (x:gsub("|u1", "|O ")))
    assert.error_matches(function() data.numpy(split) end, "object array")
    write_file(work .. "/x.npy", (x:gsub("|u1", "<i2")))
    assert.error_matches(function() data.numpy(split) end, "dtype '<i2' is not supported")
    copy_to(work, dir .. "/x_train.npy", "x.npy")
    write_file(work .. "/y.npy", read_file(dir .. "/y_train.npy"):gsub("%(4,%)", "(3,)"):sub(1, -5))
    assert.error_matches(function() data.numpy(split) end, "4 x 1 x 3 x 3 images but 3 labels")
  end)
end)

describe("torch dataset", function()
  local dir = F .. "/torch"

  it("reads torch.save files: a tuple, a dict, one tensor per file", function()
    local ds = data.torch { dir = dir }
    assert.are.same({ 5, 1, 4, 4 }, ds.images:size())
    assert.are.equal(u8(3 * 16 + 2 * 4 + 1), ds.images[3][0][2][1]:item())
    assert.are.same({ 3, 1, 4, 1, 5 }, ds.labels:totable())
    assert.are.equal(6, ds.classes)
    local test = data.torch { dir = dir, train = false }
    assert.are.equal("float32", test.images:dtype())
    assert.is_true(close(test.images[2][0][3][3]:item(), f32(2 * 16 + 15)))
    assert.are.same({ 2, 0, 5 }, test.labels:totable())
    local one = data.torch { dir = dir, train_images = "images.pt", train_labels = "labels.pt" }
    assert.is_true(equal(one.images, ds.images))
  end)

  it("loads the fixture to the values libtorch's own reader gives", function()
    local ds = data.torch { dir = dir, train_images = "images.pt", train_labels = "labels.pt" }
    local images = assert(tensor.load(dir .. "/images.pt"))
    local labels = assert(tensor.load(dir .. "/labels.pt"))
    assert.is_true(equal(images, ds.images))
    assert.is_true(equal(labels, ds.labels))
  end)

  it("reads files that libtorch's writer made (dpy.tensor's t:save)", function()
    local work = tmpdir()
    local x = tensor.rand(6, 3, 4, 4)
    local y = tensor.new({ 0, 3, 1, 2, 2, 1 }, "int64")
    assert(x:save(work .. "/x.pt"))
    assert(y:save(work .. "/y.pt"))
    local ds = data.torch { dir = work, train_images = "x.pt", train_labels = "y.pt" }
    assert.is_true(equal(ds.images, x))
    assert.are.same({ 0, 3, 1, 2, 2, 1 }, ds.labels:totable())
    assert.are.equal(4, ds.classes)
    -- a view saves its whole storage with an offset and strides: the view is what comes back
    local big = tensor.rand(3, 4, 2, 3)
    local view = big:narrow(0, 1, 2):permute(0, 3, 1, 2)
    assert(view:save(work .. "/v.pt"))
    assert(y:narrow(0, 0, 2):save(work .. "/w.pt"))
    local v = data.torch { dir = work, train_images = "v.pt", train_labels = "w.pt" }
    assert.is_true(equal(v.images, view:contiguous()))
  end)

  it("reads views (an offset, N x H x W x C strides) as their values", function()
    local ds = data.torch { dir = dir, train_file = "views.pt", mean = { 0, 0, 0 }, std = { 1, 1, 1 } }
    assert.are.same({ 2, 3, 2, 2 }, ds.images:size())
    local want = {}
    for i = 0, 23 do want[#want + 1] = u8(i) end
    assert.are.same(want, ds.images:flatten():long():totable())
    assert.are.same({ 1, 0 }, ds.labels:totable())
  end)

  it("refuses other dtypes, the legacy format, truncated and corrupt files with a message", function()
    assert.error_matches(function() data.torch { dir = dir, train_images = "half.pt", train_labels = "labels.pt" } end,
                         "half%.pt: float16 tensors are not supported")
    assert.error_matches(function() data.torch { dir = dir, train_file = "test.pt", images = "pixels" } end,
                         "test%.pt: the dict has no key pixels %(its keys: images, labels%)")
    local work = tmpdir()
    write_file(work .. "/train.pt", "\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")
    assert.error_matches(function() data.torch { dir = work } end, "legacy torch%.save format")
    local good = read_file(dir .. "/train.pt")
    for _, cut in ipairs { 3, 64, #good // 2, #good - 1 } do
      write_file(work .. "/train.pt", good:sub(1, cut))
      assert.error_matches(function() data.torch { dir = work } end, "train%.pt")
    end
    -- a byte changed inside: the archive's CRC catches it
    local at = good:find("K\x05K\x01K\x04K\x04t", 1, true)
    write_file(work .. "/train.pt", good:sub(1, at + 6) .. "\x05" .. good:sub(at + 8))
    assert.error_matches(function() data.torch { dir = work } end, "train/data%.pkl: corrupt member %(CRC error%)")
    -- crafted files with valid CRCs: a view past its storage, sizes that overflow, a command
    for name, message in pairs { past_end = "a tensor that reaches past the end of its storage",
                                 huge = "a tensor whose size is too large",
                                 evil = "global 'posix%.system' is not allowed" } do
      assert.error_matches(function() data.torch { dir = dir, train_file = name .. ".pt" } end,
                           name .. "%.pt.-" .. message)
    end
  end)
end)

describe("cifar10 from its Python batches", function()
  local dir = F .. "/cifar-10-batches-py"

  it("reads data_batch_1..5 and test_batch (Python 2's pickles, and Python 3's)", function()
    local ds = data.cifar10 { dir = dir }
    assert.are.same({ 15, 3, 32, 32 }, ds.images:size())
    local labels = {}
    for i = 1, 5 do
      for j = 0, 2 do labels[#labels + 1] = (i + j) % 10 end
    end
    assert.are.same(labels, ds.labels:totable())
    -- batch i, image j, pixel p: (31 i + 7 (3072 j + p)) % 256; p = c * 1024 + h * 32 + w
    local p = 2 * 1024 + 5 * 32 + 7
    assert.are.equal((31 * 4 + 7 * (3072 * 1 + p)) % 256, ds.images[3 * 3 + 1][2][5][7]:item())
    local test = data.cifar10 { dir = dir, train = false }
    assert.are.same({ 6, 7, 8 }, test.labels:totable())
    assert.are.equal((31 * 6 + 7 * (3072 * 2)) % 256, test.images[2][0][0][0]:item())
  end)

  it("finds cifar-10-batches-py/ below dir, and the format asked for", function()
    assert.are.equal(15, data.size(data.cifar10 { dir = F }))
    assert.are.equal(3, data.size(data.cifar10 { dir = F, train = false, format = "python" }))
    assert.error_matches(function() data.cifar10 { dir = F, format = "binary" } end,
                         "dataset cifar10: no data_batch_1%.bin or cifar%-10%-batches%-bin/data_batch_1%.bin "
                         .. "in .- %(option dir = .-%); unpack cifar%-10%-binary%.tar%.gz or "
                         .. "cifar%-10%-python%.tar%.gz of https://www%.cs%.toronto%.edu/~kriz/cifar%.html")
    assert.error_matches(function() data.cifar10 { dir = F, format = "pickle" } end, "format must be")
  end)

  it("reads CIFAR-100's train and test, fine and coarse", function()
    local ds = data.cifar100 { dir = F }
    assert.are.same({ 4, 3, 32, 32 }, ds.images:size())
    assert.are.same({ 11, 28, 45, 62 }, ds.labels:totable())
    assert.are.same({ 11, 14, 17, 0 }, data.cifar100({ dir = F, label = "coarse" }).labels:totable())
    assert.are.same({ 12, 29 }, data.cifar100({ dir = F, train = false }).labels:totable())
  end)

  it("refuses truncated and hostile pickles with a message", function()
    local work = tmpdir()
    local good = read_file(dir .. "/test_batch")
    for _, cut in ipairs { 1, 2, 50, #good // 2, #good - 1 } do
      write_file(work .. "/test_batch", good:sub(1, cut))
      assert.error_matches(function() data.cifar10 { dir = work, train = false } end, "test_batch")
    end
    write_file(work .. "/test_batch", "\x80\x02cposix\nsystem\nX\x05\x00\x00\x00touch\x85R.")
    assert.error_matches(function() data.cifar10 { dir = work, train = false } end,
                         "test_batch: pickle: global 'posix%.system' is not allowed")
    write_file(work .. "/test_batch", read_file(dir .. "/batches.meta"))
    assert.error_matches(function() data.cifar10 { dir = work, train = false } end,
                         "not a CIFAR batch %(no 'data' entry%)")
  end)

  it("refuses a label outside the classes, naming the file and the index", function()
    local work = tmpdir()
    local good = read_file(dir .. "/test_batch")
    local at = assert(good:find("labels\x94]\x94(K\6K\7K\8", 1, true))   -- the list [6, 7, 8] of the pickle
    write_file(work .. "/test_batch", good:sub(1, at + 12) .. "\12" .. good:sub(at + 14))
    assert.error_matches(function() data.cifar10 { dir = work, train = false } end,
                         "^" .. work:gsub("%p", "%%%0") .. "/test_batch: label 12 at index 1 is outside 0%.%.9$")
  end)
end)

describe("built-in datasets", function()
  it("say which file is missing, the dir option and where to get the data", function()
    local work = tmpdir()
    local cases = {
      { "fashion_mnist", "no train%-images%-idx3%-ubyte or train%-images%-idx3%-ubyte%.gz in .- %(option "
        .. "dir = .-%); install Debian's dataset%-fashion%-mnist" },
      { "mnist", "no .-ossci%-datasets" },
      { "cifar10", "no data_batch_1%.bin or data_batch_1 or" },
      { "cifar100", "no train%.bin or train or cifar%-100%-binary/train%.bin or cifar%-100%-python/train in" },
      { "numpy", "no file .-/train%.npz" },
      { "torch", "no file .-/train%.pt .-; write it with torch%.save" },
    }
    for _, case in ipairs(cases) do
      assert.error_matches(function() registry.build("dataset", { case[1], dir = work }, { train = true }) end,
                           "dataset " .. case[1]:gsub("_", "%%_") .. ": " .. case[2])
    end
    assert.error_matches(function() data.mnist { dir = nil } end, "option dir, default \"/usr/share/datasets/mnist\"")
  end)

  it("are components a config names, with their options checked", function()
    local ds = registry.build("dataset", { "torch", dir = F .. "/torch" }, { train = false })
    assert.are.equal(3, data.size(ds))
    local py = registry.build("dataset", { "cifar10", dir = F, format = "python" }, { train = false })
    assert.are.equal(3, data.size(py))
    assert.error_matches(function() registry.build("dataset", { "numpy", dri = "x" }) end,
                         "unknown option 'dri' %(did you mean 'dir'%?%)")
    -- a dict of tensors as tensor.pickle writes it (libtorch wraps the dict in restore_type_tag)
    local dir = tmpdir()
    local images, labels = tensor.rand(5, 1, 4, 4), tensor.new({ 0, 1, 2, 1, 0 }):to("int64")
    for _, split in ipairs { "train", "test" } do
      write_file(dir .. "/" .. split .. ".pt", tensor.pickle({ "data", "targets" }, { images, labels }))
    end
    local own = registry.build("dataset", { "torch", dir = dir }, { train = true })
    assert.are.equal(5, data.size(own))
    assert.are.same(labels:totable(), own.labels:totable())
  end)

  it("train a model end to end from a NumPy dataset", function()
    local config = string.format("dataset = { 'numpy', dir = %q }\nmodel = { 'mlp', hidden = { 8 } }\n"
                                 .. "epochs = 1\nbatch_size = 2\n", F .. "/numpy")
    local code, _, err, out = run_config(config)
    assert.are.equal(0, code, err)
    local m = node_metrics(out, 0)
    assert.is_truthy(m and m.test_accuracy, "no metrics in " .. out)
  end)

  it("train decentralized nodes on a torch.save dataset #e2e", function()
    local config = string.format("dataset = { 'torch', dir = %q }\nmodel = { 'mlp', hidden = { 8 } }\n"
                                 .. "nodes = 2\ngraph = 'ring'\nrounds = 2\nlocal_steps = 1\nbatch_size = 2\n"
                                 .. "peer_timeout = 20\n", F .. "/torch")
    local code, _, err, out = run_config(config)
    assert.are.equal(0, code, err)
    for uid = 0, 1 do assert.is_truthy(node_metrics(out, uid), "no metrics for node " .. uid) end
  end)
end)
