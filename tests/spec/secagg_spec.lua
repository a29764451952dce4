-- Secure aggregation: the crypto binding against independent references, the protocol of
-- dpy.secagg driven message by message (exact sums, masked vectors that look random, clients
-- that leave mid-round), and both components end to end through the binary.
local crypto = require "dpy.crypto.core"
local secagg = require "dpy.secagg"
local tensor = require "dpy.tensor"

local function key(first)
  local b = {}
  for i = 0, 31 do b[#b + 1] = string.char((first + i) % 256) end
  return table.concat(b)
end

-- Pearson correlation of two 1-d tensors (as float64).
local function correlation(a, b)
  local x, y = a:to("float64"), b:to("float64")
  x, y = x - x:mean(), y - y:mean()
  return ((x * y):sum() / (x:norm() * y:norm())):item()
end

describe("dpy.crypto", function()
  it("expands ChaCha20 keystreams as a pure-Python ChaCha20 does (across the 64 KiB chunks)", function()
    -- the all-zero key's first block is the well-known 76b8e0ad a0f13d90 ...
    local z = crypto.stream(string.rep("\0", 32), 2):bytes()
    local hex = z:gsub(".", function(c) return string.format("%02x", c:byte()) end)
    assert.are.equal("76b8e0ada0f13d90405d6ae55386bd28", hex)
    -- tests/fixtures/secagg/reference.py: word(bytes(range(32)), i), as signed int64
    local s = crypto.stream(key(0), 20001)
    local want = { [0] = 7645359380336737593, [1] = 5281276197874154893, [7] = 883087369427888066,
                   [8191] = 1084455366948162793, [8192] = 3819928541534239214, [8193] = 6269870847457145069,
                   [20000] = 6445628195897163936 }
    for i, v in pairs(want) do assert.are.equal(v, s[i]:item(), "word " .. i) end
    -- mask_ adds the same stream in place, mod 2^64, and -1 takes it off again
    local t = tensor.arange(20001)
    crypto.mask_(t, key(0))
    assert.are.equal(s[20000]:item() + 20000, t[20000]:item())
    crypto.mask_(t, key(0), -1)
    assert.is_true(t:eq(tensor.arange(20001)):all():item())
  end)

  it("agrees on one key from both sides, apart per context, and refuses a low-order point", function()
    local apk, ask = crypto.keypair()
    local bpk, bsk = crypto.keypair()
    assert.are.equal(apk, crypto.public_key(ask))
    local k1 = crypto.agree(ask, bpk, "ctx")
    assert.are.equal(32, #k1)
    assert.are.equal(k1, crypto.agree(bsk, apk, "ctx"))
    assert.are_not.equal(k1, crypto.agree(bsk, apk, "other"))
    local k, err = crypto.agree(ask, string.rep("\0", 32), "ctx")
    assert.is_nil(k)
    assert.matches("low%-order", err)
    assert.has_error(function() crypto.agree(ask, bpk) end)
    assert.has_error(function() crypto.agree("short", bpk, "c") end,
                     "bad argument #1 to 'agree' (a 32-byte key expected, got 5 bytes)")
  end)

  it("seals and opens, and refuses a tampered or foreign message", function()
    local k = key(7)
    local c = crypto.seal(k, "hello shares")
    assert.are.equal(24 + 16 + 12, #c)
    assert.are.equal("hello shares", crypto.open(k, c))
    local bad = c:sub(1, 30) .. string.char(c:byte(31) ~ 1) .. c:sub(32)
    assert.same({ nil, "sealed message does not authenticate under this key" }, { crypto.open(k, bad) })
    assert.is_nil((crypto.open(key(8), c)))
    assert.is_nil((crypto.open(k, "short")))
  end)

  it("encodes floats in fixed point, refusing what would wrap, and decodes them", function()
    local x = tensor.new { 0.5, -1.25, 3e-8, 1000 }
    local e = crypto.encode(x, 24, 2)
    assert.same({ 1 << 24, -(5 << 23), 1, 1000 * 2 * (1 << 24) }, e:totable())
    assert.is_true(crypto.decode(e, 24, 2):allclose(x, 0, 1e-7))
    local v, err = crypto.encode(tensor.new { 1, 0 / 0 }, 24)
    assert.is_nil(v)
    assert.matches("index 1 is not finite", err)
    v, err = crypto.encode(tensor.new { 1, 2, 1e6 }, 24, 1, 2 ^ 40)
    assert.is_nil(v)
    assert.matches("value 1000000 at index 2 is beyond the fixed%-point range", err)
    assert.has_error(function() crypto.mask_(tensor.zeros(3), key(0)) end)   -- float32
  end)

  it("shares secrets with Shamir's scheme, t of n recovering them", function()
    local secret = key(40)
    local shares = crypto.shamir_split(secret, 3, { 1, 2, 3, 4, 5 })
    assert.are.equal(5, #shares)
    assert.are.equal(64, #shares[1])
    assert.are.equal(secret, crypto.shamir_combine({ 2, 4, 5 }, { shares[2], shares[4], shares[5] }))
    assert.are.equal(secret, crypto.shamir_combine({ 1, 2, 3, 4, 5 }, shares))
    local s, err = crypto.shamir_combine({ 1, 3 }, { shares[1], shares[3] })
    assert.is_nil(s)
    assert.matches("inconsistent shares", err)
    assert.is_nil((crypto.shamir_combine({ 1 }, { "abc" })))
    assert.has_error(function() crypto.shamir_split(secret, 6, { 1, 2 }) end)
  end)
end)

-- Runs one aggregation among the clients uids (aggregator 0, round 1), message by message.
-- leave = { [uid] = step } drops a client before it sends that step's message (KEYS = 0,
-- SHARES = 2, MASKED = 4, UNMASK = 6). Returns the unmasked sum or nil, why, and the clients.
local function aggregate(uids, inputs, leave, fraction)
  leave, fraction = leave or {}, fraction or 0.5
  local agg = secagg.aggregator(0, 1, fraction)
  local clients, got = {}, {}
  local function present(u, step) return not (leave[u] and leave[u] <= step) end
  for _, u in ipairs(uids) do
    clients[u] = secagg.client(u, 0, 1, fraction)
    if present(u, 0) then got[u] = clients[u].advertise end
  end
  local roster = agg:roster(got)
  got = {}
  for _, u in ipairs(uids) do
    if present(u, 2) then got[u] = assert(clients[u]:share(roster)) end
  end
  local fwd, why = agg:forward(got)
  if not fwd then return nil, why end
  got = {}
  for u, m in pairs(fwd) do
    assert(clients[u]:receive(m))
    if present(u, 4) then got[u] = clients[u]:mask(inputs[u]:clone()) end
  end
  local survivors, gave_up = agg:survivors(got)
  if gave_up then return nil, gave_up end
  got = {}
  for _, u in ipairs(agg.u3) do
    if present(u, 6) then
      local m, err = clients[u]:unmask(survivors)
      if not m then return nil, err end
      got[u] = m
    end
  end
  return agg:unmask(got)
end

local function inputs_for(uids, d)
  local g = tensor.generator(5)
  local inputs, plain = {}, {}
  for _, u in ipairs(uids) do
    plain[u] = tensor.randn(d, { generator = g }) * 0.1
    inputs[u] = assert(crypto.encode(plain[u], 24, u))   -- weighted, as fedavg's counts weigh
  end
  return inputs, plain
end

local function plain_sum(inputs, uids)
  local s = tensor.zeros(inputs[uids[1]]:numel(), "int64")
  for _, u in ipairs(uids) do s:add_(inputs[u]) end
  return s
end

describe("dpy.secagg", function()
  local uids = { 1, 2, 3, 5, 8 }

  it("gives the aggregator the plain fixed-point sum, bit for bit", function()
    local inputs = inputs_for(uids, 3000)
    local sum, survivors = aggregate(uids, inputs)
    assert.same(uids, survivors)
    assert.is_true(sum:eq(plain_sum(inputs, uids)):all():item())
  end)

  it("shows the aggregator masked vectors uncorrelated with the models (and the sum unmasked)", function()
    local inputs, plain = inputs_for(uids, 20000)
    local agg = secagg.aggregator(0, 1, 0.5)
    local clients, got = {}, {}
    for _, u in ipairs(uids) do
      clients[u] = secagg.client(u, 0, 1, 0.5)
      got[u] = clients[u].advertise
    end
    local roster = agg:roster(got)
    got = {}
    for _, u in ipairs(uids) do got[u] = clients[u]:share(roster) end
    for u, m in pairs(agg:forward(got)) do assert(clients[u]:receive(m)) end
    for _, u in ipairs(uids) do
      local masked = clients[u]:mask(inputs[u]:clone())
      -- the model itself correlates perfectly with its encoding; the masked vector not at all
      assert.is_true(correlation(inputs[u], plain[u]) > 0.999)
      local rho = correlation(crypto.decode(masked, 24), plain[u])
      assert.is_true(math.abs(rho) < 0.04, "node " .. u .. ": correlation " .. rho)
      -- and half its values are negative, as uniform words are
      local neg = masked:lt(0):sum():item() / masked:numel()
      assert.is_true(math.abs(neg - 0.5) < 0.02, "share of negative words " .. neg)
    end
  end)

  it("recovers the masks of a client that left after sharing; the sum is the survivors'", function()
    local inputs = inputs_for(uids, 3000)
    local sum, survivors = aggregate(uids, inputs, { [3] = 4 })   -- 3 never sends its masked model
    assert.same({ 1, 2, 5, 8 }, survivors)
    assert.is_true(sum:eq(plain_sum(inputs, survivors)):all():item())
    -- left before sharing (not among the clients whose masks count), and one silent at unmasking
    sum, survivors = aggregate(uids, inputs, { [2] = 2, [8] = 6 })
    assert.same({ 1, 3, 5, 8 }, survivors)
    assert.is_true(sum:eq(plain_sum(inputs, survivors)):all():item())
    -- the weighted average over the survivors: sum / the survivors' weights, as fedavg divides
    local avg = crypto.decode(sum, 24, 1 + 3 + 5 + 8)
    local want = tensor.zeros(3000, "float64")
    for _, u in ipairs(survivors) do want:add_(crypto.decode(inputs[u], 24):to("float64")) end
    assert.is_true(avg:to("float64"):allclose(want / 17, 0, 1e-7))
  end)

  it("gives up, naming the threshold, when too few clients are left", function()
    local inputs = inputs_for(uids, 100)
    local sum, why = aggregate(uids, inputs, { [1] = 4, [2] = 4, [3] = 4 })   -- 2 of 5 left, t = 3
    assert.is_nil(sum)
    assert.matches("only 2 survivors %(threshold 3%)", why)
    sum, why = aggregate(uids, inputs, { [1] = 2, [2] = 2, [3] = 2 })
    assert.is_nil(sum)
    assert.matches("2 of 5 clients shared keys %(threshold 3%)", why)
  end)

  it("refuses rosters and survivor lists that would unmask a client", function()
    local c = secagg.client(1, 0, 1, 0.5)
    local other = secagg.client(2, 0, 1, 0.5)
    local agg = secagg.aggregator(0, 1, 0.5)
    assert.same({ nil, "the roster does not hold this node's keys" }, { c:share(agg:roster { [2] = other.advertise }) })
    assert.same({ nil, "malformed roster" }, { c:share("xyz") })
    local roster = agg:roster { [1] = c.advertise, [2] = other.advertise }
    local fwd = agg:forward { [1] = assert(c:share(roster)), [2] = assert(other:share(roster)) }
    assert(c:receive(fwd[1]))
    local m, why = c:unmask(string.pack("<I4I4", 1, 1))
    assert.is_nil(m)
    assert.matches("names node 1 unexpectedly", why)
    assert.matches("leaves this node out", select(2, c:unmask(string.pack("<I4", 2))))
  end)
end)

describe("secure aggregation end to end", function()
  local TINY, run = TINY_RUN, run_config
  local crash = [[
local registry = require "dpy.registry"
return registry.register { kind = "action", name = "crash", new = function() return {
  post_train = function(node, r) if node.uid == 3 and r == 2 then error("gone at round 2") end end } end }
]]

  -- node uid's test losses of the run in out, as a list
  local function losses(out, uid)
    local l = {}
    for i, p in ipairs(node_metrics(out, uid).test_loss) do l[i] = p[2] end
    return l
  end

  local function close_lists(a, b, tol)
    assert.are.equal(#a, #b)
    for i = 1, #a do assert.is_true(math.abs(a[i] - b[i]) < tol, string.format("%d: %g vs %g", i, a[i], b[i])) end
  end

  it("secure_fedavg averages as fedavg does, and without a client that left mid-round #e2e", function()
    local base = TINY:gsub("nodes = 4", "nodes = 5")
    local c1, _, e1, plain = run(base .. "algorithm = 'fedavg'\n")
    local c2, _, e2, secure = run(base .. "algorithm = 'secure_fedavg'\n")
    assert.are.equal(0, c1, e1)
    assert.are.equal(0, c2, e2)
    close_lists(losses(plain, 0), losses(secure, 0), 1e-4)
    assert.matches("round 3: secure aggregation of 4 of 4 clients", read_file(secure .. "/0.log"))
    -- node 3 fails after the key exchange of round 2, before sending its masked model
    local dir = tmpdir()
    write_file(dir .. "/crash.lua", crash)
    local failing = base .. "on_peer_failure = 'continue'\nactions = { '" .. dir .. "/crash.lua' }\n"
    _, _, _, plain = run(failing .. "algorithm = 'fedavg'\n")
    c2, _, e2, secure = run(failing .. "algorithm = 'secure_fedavg'\n")
    assert.are.equal(1, c2)
    assert.matches("node 3 failed: .*gone at round 2", e2)
    local log = read_file(secure .. "/0.log")
    assert.matches("round 2: peer 3 is gone %(secure aggregation, step 4%)", log)
    assert.matches("round 2: secure aggregation of 3 of 4 clients", log)
    close_lists(losses(plain, 0), losses(secure, 0), 1e-4)   -- the same survivors' average
  end)

  it("secure_average mixes as average does, a failed neighbour's weight staying home #e2e", function()
    local base = TINY:gsub("nodes = 4", "nodes = 6") .. "graph = { 'regular', degree = 3 }\n"
    local c1, _, e1, plain = run(base)
    local c2, _, e2, secure = run(base .. "sharing = 'secure_average'\n")
    assert.are.equal(0, c1, e1)
    assert.are.equal(0, c2, e2)
    for uid = 0, 5 do close_lists(losses(plain, uid), losses(secure, uid), 1e-4) end
    local dir = tmpdir()
    write_file(dir .. "/crash.lua", crash)
    local failing = base .. "on_peer_failure = 'continue'\nactions = { '" .. dir .. "/crash.lua' }\n"
    _, _, _, plain = run(failing)
    c2, _, _, secure = run(failing .. "sharing = 'secure_average'\n")
    assert.are.equal(1, c2)
    for _, uid in ipairs { 0, 1, 2, 4, 5 } do close_lists(losses(plain, uid), losses(secure, uid), 1e-4) end
  end)

  it("refuses bad options with the option's name", function()
    local code, _, err = run(TINY .. "algorithm = { 'secure_fedavg', threshold = 1.5 }\n")
    assert.are_not.equal(0, code)
    assert.matches("option 'threshold' must be a number >= 0 and < 1, got 1.5", err)
  end)
end)
