-- dpy.data: the idx and CIFAR readers on small files written here, loaders and their batches.
local tensor = require "dpy.tensor"
local data = require "dpy.data"
local data_core = require "dpy.data.core"

local function be32(n) return string.pack(">I4", n) end

-- An idx pair: n images of h x w (pixel = (i + r + c) % 256), labels i % 10.
local function write_idx(dir, prefix, n, h, w, gz)
  local px = {}
  for i = 0, n - 1 do
    for r = 0, h - 1 do
      for c = 0, w - 1 do px[#px + 1] = string.char((i + r + c) % 256) end
    end
  end
  local images = "\0\0\8\3" .. be32(n) .. be32(h) .. be32(w) .. table.concat(px)
  local lbl = {}
  for i = 0, n - 1 do lbl[#lbl + 1] = string.char(i % 10) end
  local labels = "\0\0\8\1" .. be32(n) .. table.concat(lbl)
  local ipath = dir .. "/" .. prefix .. "-images-idx3-ubyte"
  local lpath = dir .. "/" .. prefix .. "-labels-idx1-ubyte"
  write_file(ipath, images)
  write_file(lpath, labels)
  if gz then
    assert(os.execute("gzip -f " .. ipath .. " " .. lpath))
  end
end

describe("idx datasets", function()
  it("read mnist-format files, gzipped or not", function()
    for _, gz in ipairs { false, true } do
      local dir = tmpdir()
      write_idx(dir, "train", 12, 4, 5, gz)
      write_idx(dir, "t10k", 3, 4, 5, gz)
      local ds = data.mnist { dir = dir }
      assert.are.same({ 12, 1, 4, 5 }, ds.images:size())
      assert.are.equal(7, ds.images[3][0][2][2]:item())   -- (3 + 2 + 2) % 256
      assert.are.same({ 0, 1, 2 }, ds.labels:narrow(0, 0, 3):totable())
      assert.are.equal(3, data.size(data.mnist { dir = dir, train = false }))
      assert.is_true(ds.images:is_readonly())
    end
  end)

  it("reports a missing, truncated or corrupt file", function()
    local dir = tmpdir()
    assert.error_matches(function() data.mnist { dir = dir } end, "no train%-images%-idx3%-ubyte")
    write_file(dir .. "/x", "\0\0\8\1" .. be32(10) .. "abc")
    local t, err = data_core.read_idx(dir .. "/x")
    assert.is_nil(t)
    assert.matches("promises 10 bytes of data but the file holds 3", err)
    write_file(dir .. "/y", "garbage!")
    assert.matches("bad magic", select(2, data_core.read_idx(dir .. "/y")))
    write_file(dir .. "/z.gz", "\31\139\8\0 not really gzip")
    assert.is_nil(data_core.read_idx(dir .. "/z.gz"))
  end)

  -- every node of a process loads its datasets: an idx split is found, read and checked once
  it("finds and reads an idx split once per process", function()
    local dir = tmpdir()
    write_idx(dir, "train", 6, 2, 2)
    local calls, read_idx = 0, data_core.read_idx
    data_core.read_idx = function(...) calls = calls + 1 return read_idx(...) end
    local ok, err = pcall(function()
      local first = data.mnist { dir = dir }
      assert.equal(2, calls)
      os.remove(dir .. "/train-images-idx3-ubyte")
      os.remove(dir .. "/train-labels-idx1-ubyte")
      local again = data.mnist { dir = dir }   -- the process's copy: no file looked for
      assert.equal(2, calls)
      assert.same(first.images:size(), again.images:size())
      assert.is_true(again.images:is_readonly() and again.labels:is_readonly())
    end)
    data_core.read_idx = read_idx
    assert(ok, err)
  end)

  it("refuse a label outside the classes, naming the file and the index", function()
    local dir = tmpdir()
    write_idx(dir, "train", 6, 2, 2)
    local lpath = dir .. "/train-labels-idx1-ubyte"
    local bytes = read_file(lpath)
    write_file(lpath, bytes:sub(1, 8 + 3) .. "\11" .. bytes:sub(8 + 5))
    assert.error_matches(function() data.mnist { dir = dir } end,
                         "^" .. lpath:gsub("%p", "%%%0") .. ": label 11 at index 3 is outside 0%.%.9$")
    assert.error_matches(function() data.fashion_mnist { dir = dir } end, "label 11 at index 3 is outside 0%.%.9")
  end)

  it("check a file's labels once per process (every node loads the datasets), and every file", function()
    local dir, bad = tmpdir(), tmpdir()
    write_idx(dir, "train", 6, 2, 2)
    write_idx(bad, "train", 6, 2, 2)
    local lpath = bad .. "/train-labels-idx1-ubyte"
    local bytes = read_file(lpath)
    write_file(lpath, bytes:sub(1, 8 + 3) .. "\11" .. bytes:sub(8 + 5))
    local methods = require("dpy.tensor.core").methods
    local min, mins = methods.min, 0
    methods.min = function(...) mins = mins + 1; return min(...) end
    local ok, err = pcall(function()
      data.mnist { dir = dir }
      local first = mins
      data.mnist { dir = dir }
      assert.equal(first, mins)   -- the second load of the same file checks nothing again
      assert.error_matches(function() data.mnist { dir = bad } end, "label 11 at index 3 is outside 0%.%.9")
    end)
    methods.min = min
    assert(ok, err)
  end)

  describe("mapped through the cache directory", function()
    -- Reads dir's train images in a fresh process with cache dir cache; returns its output
    -- (the sum of the pixels and whether the data is a mapping of a cache file), and stderr.
    local function read_in_process(dir, cache)
      local script = dir .. "/read.lua"
      write_file(script, string.format([[
        require "dpy.tensor"
        local t = assert(require("dpy.data.core").read_idx(%q, %q))
        local mapped = false
        for l in io.lines("/proc/self/maps") do mapped = mapped or l:find(%q, 1, true) ~= nil end
        print(t:long():sum():item(), mapped)
      ]], dir .. "/train-images-idx3-ubyte.gz", cache, cache))
      local err = dir .. "/stderr"
      local p = io.popen(string.format("%s %s 2> %s", shell_quote(DPY_BIN), script, err))
      local out = p:read("a")
      p:close()
      return out, read_file(err)
    end

    local function cache_files(cache)
      local p = io.popen("ls " .. cache)
      local names = {}
      for l in p:lines() do names[#names + 1] = l end
      p:close()
      return names
    end

    it("decompresses a gzipped file once and maps the copy, with the same data", function()
      local dir, cache = tmpdir(), tmpdir() .. "/cache"
      write_idx(dir, "train", 50, 4, 5, true)
      local plain = data_core.read_idx(dir .. "/train-images-idx3-ubyte.gz")
      local want = tostring(plain:long():sum():item())
      assert.are.equal(want .. "\ttrue\n", read_in_process(dir, cache))
      local names = cache_files(cache)
      assert.are.equal(1, #names)
      assert.matches("^train%-images%-idx3%-ubyte%-%x+$", names[1])
      assert.are.equal(16 + 50 * 20, #read_file(cache .. "/" .. names[1]))
      -- a copy torn by a crash is made again
      write_file(cache .. "/" .. names[1], "\0\0\8\3" .. be32(50) .. be32(4) .. be32(5) .. "torn")
      assert.are.equal(want .. "\ttrue\n", read_in_process(dir, cache))
      assert.are.equal(16 + 50 * 20, #read_file(cache .. "/" .. names[1]))
    end)

    it("reads into memory, and says why, when the cache cannot be written", function()
      local dir = tmpdir()
      write_idx(dir, "train", 5, 2, 2, true)
      write_file(dir .. "/file", "")
      local out, err = read_in_process(dir, dir .. "/file/cache")
      assert.matches("^%d+\tfalse\n$", out)
      assert.matches("train%-images%-idx3%-ubyte%.gz: reading into memory, not mapped %(cannot", err)
    end)
  end)

  it("refuses in-place writes to the shared dataset", function()
    local dir = tmpdir()
    write_idx(dir, "train", 2, 2, 2)
    write_idx(dir, "t10k", 2, 2, 2)
    local ds = data.mnist { dir = dir }
    assert.error_matches(function() ds.images:fill_(0) end, "read%-only dpy.Tensor")
    assert.error_matches(function() ds.images[0]:zero_() end, "read%-only")
    assert.are.equal(0, ds.images:clone():fill_(0):sum():item())
  end)

  it("reads Fashion-MNIST from the Debian package", function()
    local ds = data.fashion_mnist { train = false }
    assert.are.same({ 10000, 1, 28, 28 }, ds.images:size())
    assert.are.equal(10, ds.classes)
    assert.are.equal(9, ds.labels[0]:item())   -- the first test image is an ankle boot
  end)
end)

describe("cifar datasets", function()
  local function record(labels, fill)
    return table.concat(labels) .. string.rep(string.char(fill), 3072)
  end

  it("read the binary format of CIFAR-10 and CIFAR-100", function()
    local dir = tmpdir()
    for i = 1, 5 do
      write_file(string.format("%s/data_batch_%d.bin", dir, i),
                 record({ string.char(i) }, i) .. record({ "\0" }, 0))
    end
    write_file(dir .. "/test_batch.bin", record({ "\9" }, 255))
    local train = data.cifar10 { dir = dir }
    assert.are.same({ 10, 3, 32, 32 }, train.images:size())
    assert.are.same({ 1, 0, 2, 0, 3, 0, 4, 0, 5, 0 }, train.labels:totable())
    assert.are.equal(3 * 3072, train.images[4]:long():sum():item())
    assert.are.equal(9, data.cifar10({ dir = dir, train = false }).labels[0]:item())

    write_file(dir .. "/train.bin", record({ "\3", "\42" }, 1))
    write_file(dir .. "/test.bin", record({ "\4", "\43" }, 1))
    assert.are.equal(42, data.cifar100({ dir = dir }).labels[0]:item())
    local coarse = data.cifar100 { dir = dir, label = "coarse" }
    assert.are.equal(3, coarse.labels[0]:item())
    assert.are.equal(20, coarse.classes)
  end)

  it("name the caller's line in an option's error, as data.numpy does (both load when first called)", function()
    local function line_of(f)
      local ok, err = pcall(f)
      assert.is_false(ok)
      return tonumber(tostring(err):match("data_spec%.lua:(%d+):")), err
    end
    local here = debug.getinfo(1, "l").currentline
    local l1, e1 = line_of(function() local ds = data.cifar10 { format = "zip" }; return ds end)
    local l2, e2 = line_of(function() local ds = data.numpy { bogus = 1 }; return ds end)
    local l3, e3 = line_of(function() local ds = data.cifar100 { bogus = 1 }; return ds end)
    assert.are.equal(here + 1, l1, e1)
    assert.are.equal(here + 2, l2, e2)
    assert.are.equal(here + 3, l3, e3)
  end)

  it("reports a file that is not whole records", function()
    local dir = tmpdir()
    write_file(dir .. "/test_batch.bin", string.rep("x", 3074))
    assert.error_matches(function() data.cifar10 { dir = dir, train = false } end, "not a whole number of 3073%-byte")
  end)

  it("refuse a label outside the classes, naming the file and the index", function()
    local dir = tmpdir()
    for i = 1, 5 do
      write_file(string.format("%s/data_batch_%d.bin", dir, i), record({ "\1" }, 0) .. record({ "\2" }, 0))
    end
    write_file(dir .. "/data_batch_2.bin", record({ "\1" }, 0) .. record({ "\12" }, 0))
    assert.error_matches(function() data.cifar10 { dir = dir } end,
                         "^" .. dir:gsub("%p", "%%%0") .. "/data_batch_2%.bin: label 12 at index 1 is outside 0%.%.9$")
    write_file(dir .. "/train.bin", record({ "\3", "\42" }, 1) .. record({ "\20", "\1" }, 1))
    assert.error_matches(function() data.cifar100 { dir = dir, label = "coarse" } end,
                         "train%.bin: label 20 at index 1 is outside 0%.%.19")
    write_file(dir .. "/train.bin", record({ "\3", "\100" }, 1))
    assert.error_matches(function() data.cifar100 { dir = dir } end,
                         "train%.bin: label 100 at index 0 is outside 0%.%.99")
  end)
end)

describe("loaders", function()
  local dir = tmpdir()
  write_idx(dir, "train", 10, 2, 2)
  write_idx(dir, "t10k", 2, 2, 2)
  local ds = data.mnist { dir = dir }

  it("batch a subset, with the last batch short unless drop_last", function()
    local l = data.loader(ds, { batch_size = 4, shuffle = false })
    assert.are.equal(3, #l)
    local sizes = {}
    for x, y in l:epoch() do
      sizes[#sizes + 1] = y:size(0)
      assert.are.equal("float32", x:dtype())
      assert.are.equal("int64", y:dtype())
    end
    assert.are.same({ 4, 4, 2 }, sizes)
    local d = data.loader(ds, { batch_size = 4, drop_last = true })
    assert.are.equal(2, #d)
    local s = data.loader(ds, { batch_size = 2, shuffle = false, indices = tensor.new { 7, 3 } })
    local _, y = s:next()
    assert.are.same({ 7, 3 }, y:totable())
  end)

  it("normalizes with the dataset's mean and std", function()
    local l = data.loader(ds, { batch_size = 1, shuffle = false })
    local x = l:next()   -- image 0: pixels 0, 1, 1, 2
    local expect = (1 / 255 - 0.1307) / 0.3081
    assert.is_true(math.abs(x[0][0][0][1]:item() - expect) < 1e-5)
    local raw = data.loader(ds, { batch_size = 1, shuffle = false, normalize = false }):next()
    assert.is_true(math.abs(raw[0][0][1][1]:item() - 2 / 255) < 1e-6)
  end)

  it("shuffles reproducibly from a generator and covers every sample once per epoch", function()
    local function order(seed)
      local l = data.loader(ds, { batch_size = 3, generator = tensor.generator(seed) })
      local seen = {}
      for _, y in l:epoch() do
        for _, v in ipairs(y:totable()) do seen[#seen + 1] = v end
      end
      return seen
    end
    assert.are.same(order(5), order(5))
    assert.are_not.same(order(5), order(6))
    local sorted = order(5)
    table.sort(sorted)
    assert.are.same({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, sorted)
  end)

  it("decode a read-only dataset once per process, as their batches are", function()
    local x, y = data.decoded(ds)
    assert.are.same({ 10, 1, 2, 2 }, x:size())
    assert.are.equal("float32", x:dtype())
    assert.are.equal("int64", y:dtype())
    assert.is_true(x:is_readonly() and y:is_readonly())
    for i = 0, 9 do   -- pixel (i + r + c) % 256, normalized with MNIST's mean and std
      assert.are.equal(i % 10, y[i]:item())
      for r = 0, 1 do
        for c = 0, 1 do
          local want = ((i + r + c) % 256 / 255 - 0.1307) / 0.3081
          assert.is_true(math.abs(x[i][0][r][c]:item() - want) < 1e-6)
        end
      end
    end
    local bx, by = data.loader(ds, { batch_size = 10, shuffle = false }):next()
    assert.are.equal(bx:bytes(), x:bytes())   -- bit for bit what a loader gives
    assert.are.equal(by:bytes(), y:bytes())
    -- a second call (another node of the process) shares the same bytes; a dataset of the
    -- node's own (not read-only) is not shared
    local x2, y2 = data.decoded(data.mnist { dir = dir })
    assert.are.equal(data_core.storage(x), data_core.storage(x2))
    assert.are.equal(data_core.storage(y), data_core.storage(y2))
    assert.is_nil(data.decoded { images = ds.images:clone(), labels = ds.labels, mean = ds.mean, std = ds.std })
    assert.is_nil(data.decoded(data.relabel(ds, { [0] = 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 })))   -- its own labels
    -- the first n only (test_samples), shared as such
    local x4, y4 = data.decoded(ds, 4)
    assert.are.same({ 4, 1, 2, 2 }, x4:size())
    assert.are.equal(x:narrow(0, 0, 4):bytes(), x4:bytes())
    assert.are.equal(y:narrow(0, 0, 4):bytes(), y4:bytes())
    assert.are.equal(data_core.storage(x4), data_core.storage((data.decoded(ds, 4))))
    assert.error_matches(function() data.decoded(ds, 11) end, "data.decoded: n must be in 1..10, got 11")
  end)

  it("evaluate a model on the shared decoded set as on a loader's batches", function()
    local nn, trainer = require "dpy.nn", require "dpy.trainer"
    tensor.manual_seed(2)
    local m = nn.sequential { nn.flatten(), nn.linear(4, 10) }
    -- the loss and accuracy by hand, from a loader's batches
    local function by_hand(set, indices, bs)
      local l = data.loader(set, { batch_size = bs, shuffle = false, indices = indices })
      local total, hits, n = 0, 0, 0
      for bx, by in l:epoch() do
        local out = m(bx)
        total = total + nn.cross_entropy(out, by, "sum"):item()
        hits = hits + out:argmax(1):eq(by):sum():item()
        n = n + by:size(0)
      end
      return total / n, hits / n
    end
    local own = { images = ds.images:clone(), labels = ds.labels:clone(), mean = ds.mean, std = ds.std }
    local cases = { { nil, 4 }, { tensor.arange(7), 3 }, { tensor.arange(2, 9), 4 }, { tensor.new { 7, 3, 5 }, 2 },
                    { tensor.arange(10), 10 } }
    for _, c in ipairs(cases) do
      for _, set in ipairs { ds, own } do
        local loss, acc = trainer.evaluate(m, set, { batch_size = c[2], indices = c[1] })
        local want_loss, want_acc = by_hand(set, c[1], c[2])
        assert.are.equal(want_loss, loss)   -- the same batches: the same bits
        assert.are.equal(want_acc, acc)
      end
    end
  end)

  it("train and evaluate with mse and bce_with_logits on one-hot rows, nll on log-probabilities only", function()
    local nn, trainer, optim = require "dpy.nn", require "dpy.trainer", require "dpy.optim"
    -- the losses by their definitions, in plain Lua over the outputs' values (mean over all entries)
    local function by_hand(loss, out, labels)
      local o, sum, terms = out:totable(), 0, 0
      for i, row in ipairs(o) do
        for k, v in ipairs(row) do
          local t = (k - 1 == labels[i]) and 1 or 0
          if loss == "mse" then sum = sum + (v - t) ^ 2
          else sum = sum + math.max(v, 0) - v * t + math.log(1 + math.exp(-math.abs(v))) end
          terms = terms + 1
        end
      end
      return sum / terms
    end
    local x, y = data.loader(ds, { batch_size = 10, shuffle = false }):next()   -- what both see
    local labels = y:totable()
    for _, loss in ipairs { "mse", "bce_with_logits" } do
      tensor.manual_seed(2)
      local m = nn.sequential { nn.flatten(), nn.linear(4, 10) }
      local want = by_hand(loss, m(x), labels)
      local test_loss, acc = trainer.evaluate(m, ds, { batch_size = 4, loss = loss })
      assert.is_true(math.abs(test_loss - want) < 1e-5, loss .. ": " .. test_loss .. " against " .. want)
      assert.is_true(acc >= 0 and acc <= 1)
      local first4 = by_hand(loss, m(x:narrow(0, 0, 4)), { labels[1], labels[2], labels[3], labels[4] })
      local t = trainer.new { model = m, optimizer = optim.sgd(m, { lr = 0.1 }), loss = loss,
                              loader = data.loader(ds, { batch_size = 4, shuffle = false }) }
      assert.is_true(math.abs(t:step() - first4) < 1e-5, loss)
      assert.is_true(t:run(20) < first4, loss .. " trains")
    end
    -- the one-hot rows take the outputs' dtype: a float64 model's loss in float64
    local zeros64 = tensor.zeros(2, 3, "float64")
    local rows = trainer.targets("mse", zeros64, tensor.new({ 0, 2 }, "int64"), true)
    assert.are.same({ "float64", { { 1, 0, 0 }, { 0, 0, 1 } } }, { rows:dtype(), rows:totable() })
    tensor.manual_seed(2)
    local logits = nn.sequential { nn.flatten(), nn.linear(4, 10) }
    local t = trainer.new { model = logits, optimizer = optim.sgd(logits, { lr = 0.1 }), loss = "nll",
                            loader = data.loader(ds, { batch_size = 4, shuffle = false }) }
    assert.error_matches(function() t:step() end, "loss 'nll' takes log%-probabilities")
    assert.error_matches(function() trainer.evaluate(logits, ds, { loss = "nll" }) end, "takes log%-probabilities")
    local logp = nn.sequential { nn.flatten(), nn.linear(4, 10), nn.log_softmax(1) }
    local nll = trainer.evaluate(logp, ds, { loss = "nll" })
    assert.is_true(math.abs(trainer.evaluate(logp, ds) - nll) < 1e-6)   -- cross entropy of log-probabilities
  end)

  it("rejects bad options", function()
    assert.error_matches(function() data.loader(ds, { batch_size = 0 }) end, "batch_size must be >= 1")
    assert.error_matches(function() data.loader(ds, { batchsize = 2 }) end, "did you mean 'batch_size'")
  end)

  it("take indices as a Lua list too, and name a bad one when built, not at a batch", function()
    local _, y = data.loader(ds, { batch_size = 2, shuffle = false, indices = { 7, 3 } }):next()
    assert.are.same({ 7, 3 }, y:totable())
    local bad = {
      { { 1, 10 }, "indices%[2%] is 10, where a sample of the dataset's 0%.%.9 belongs" },
      { tensor.new({ 4, -1 }, "int64"), "indices%[2%] is %-1, where a sample of the dataset's 0%.%.9 belongs" },
      { { 1, 2.5 }, "indices%[2%] must be an integer, got 2%.5" },
      { tensor.new { 1.0, 2.0 }, "indices must be a 1%-D integer tensor or a Lua list, got a float32 tensor" },
      { tensor.new({ { 1, 2 } }, "int64"), "indices must be a 1%-D integer tensor or a Lua list, got a 2%-D tensor" },
      { "1", "indices must be a 1%-D integer tensor or a Lua list, got a string" },
    }
    for _, case in ipairs(bad) do
      assert.error_matches(function() data.loader(ds, { indices = case[1] }) end, "data.loader: " .. case[2])
    end
  end)
end)
