-- dpy-lua dispatch against a real OpenSSH server on 127.0.0.1 (tests/ssh/sshd: a non-default port,
-- keys made for the test, its host key in a test known_hosts), reached as two "remotes": the
-- same server under the names 127.0.0.1 and localhost.
local BIN = shell_quote(DPY_BIN)
local SSHD = shell_quote(REPO .. "/tests/ssh/sshd")

describe("dpy-lua dispatch", function()
  local dir, keys, port
  local function remotes(extra_defaults, path)
    path = path or dir .. "/remotes.lua"
    write_file(path, string.format([[
return {
  defaults = { port = %d, identity = %q, known_hosts = %q, dpy_lua = %q, %s },
  remotes = {
    { host = "127.0.0.1", work_dir = %q },
    { host = "localhost", address = "127.0.0.1", processes = 2, work_dir = %q },
  },
}
]], port, keys .. "/user_key", keys .. "/known_hosts", DPY_BIN, extra_defaults or "", dir .. "/remote-a",
    dir .. "/remote-b"))
    return path
  end
  local function dispatch(args)
    return sh("cd " .. dir .. " && " .. BIN .. " dispatch c.lua --remotes remotes.lua " .. args)
  end

  setup(function()
    dir = tmpdir()
    keys = dir .. "/keys"
    port = 45000 + math.random(0, 9999)
    local code, _, err = sh(SSHD .. " start " .. keys .. " " .. port)
    assert.are.equal(0, code, err)
    write_file(dir .. "/tiny.lua", TINY_RUN)
    write_file(dir .. "/c.lua", "include 'tiny.lua'\n")   -- dispatch uploads what a config includes
  end)

  teardown(function() sh(SSHD .. " stop " .. keys) end)

  it("runs the processes on the remotes and brings every result back, the numbers of a local run", function()
    remotes()
    local code, out, err = dispatch("-q --out " .. dir .. "/d1")
    assert.are.equal(0, code, err)
    assert.matches("4 nodes %(dpsgd, 3 processes%)", out)
    local rc, _, lerr = sh(BIN .. " run " .. dir .. "/c.lua processes=3 --out " .. dir .. "/local")
    assert.are.equal(0, rc, lerr)
    for uid = 0, 3 do
      assert.matches("done: 3 rounds", read_file(string.format("%s/d1/%d.log", dir, uid)))
      assert.are.same(node_metrics(dir .. "/local", uid).test_accuracy, node_metrics(dir .. "/d1", uid).test_accuracy)
    end
    assert.matches('"launcher":"dispatch"', read_file(dir .. "/d1/manifest.json"))
    assert.are.equal(TINY_RUN, read_file(dir .. "/d1/tiny.lua"), "the run keeps what its config includes")
    assert.matches('%["127.0.0.1:%d+","127.0.0.1:%d+","127.0.0.1:%d+"%]', read_file(dir .. "/d1/addresses.json"))
  end)

  it("runs each time in a fresh remote directory, and brings back only this run's files", function()
    remotes()
    local host = require "dpy.host.core"
    -- what an earlier run into the same --out left on the remotes, as dispatch once laid them out
    for _, remote in ipairs { "remote-a", "remote-b" } do
      assert(host.mkdir_p(string.format("%s/%s/d5", dir, remote)))
      write_file(string.format("%s/%s/d5/7.log", dir, remote), "a node of an earlier run\n")
      write_file(string.format("%s/%s/d5/process-5.out", dir, remote), "an earlier process\n")
    end
    local code, _, err = dispatch("-q --out " .. dir .. "/d5")
    assert.are.equal(0, code, err)
    local run_id = read_file(dir .. "/d5/manifest.json"):match('"run_id":(%d+)')
    for _, remote in ipairs { "remote-a", "remote-b" } do
      assert.truthy(read_file(string.format("%s/%s/d5-%s/config.effective.lua", dir, remote, run_id)), remote)
    end
    assert.is_nil(read_file(dir .. "/d5/7.log"), "an earlier run's log was collected")
    assert.is_nil(read_file(dir .. "/d5/process-5.out"))
    for uid = 0, 3 do assert.matches("done: 3 rounds", read_file(string.format("%s/d5/%d.log", dir, uid))) end
    -- again, replacing it: another remote directory, the same numbers
    code, _, err = dispatch("-q --force --out " .. dir .. "/d5")
    assert.are.equal(0, code, err)
    local again = read_file(dir .. "/d5/manifest.json"):match('"run_id":(%d+)')
    assert.are_not.equal(run_id, again)
    assert.truthy(read_file(string.format("%s/remote-a/d5-%s/config.effective.lua", dir, again)))
  end)

  it("ships every file the run uses, where the config finds them, and records them in the run directory", function()
    remotes()
    assert(require("dpy.host.core").mkdir_p(dir .. "/parts"))
    assert(require("dpy.host.core").mkdir_p(dir .. "/acts"))
    write_file(dir .. "/parts/tiny.lua", TINY_RUN)
    write_file(dir .. "/parts/base.lua", "include 'tiny.lua'\nrounds = 2\n")   -- relative to parts/
    write_file(dir .. "/acts/noisy.lua", read_file(REPO .. "/configs/actions/noisy_model.lua"))
    write_file(dir .. "/ship.lua", "include 'parts/base.lua'\n"
                                   .. "actions = { { 'acts/noisy.lua', nodes = { 1 }, sigma = 0.5 } }\n")
    local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " dispatch ship.lua --remotes remotes.lua -q --out "
                            .. dir .. "/d3")
    assert.are.equal(0, code, err)
    assert.matches("noisy_model: sending models with noise", read_file(dir .. "/d3/1.log"))
    local run_id = read_file(dir .. "/d3/manifest.json"):match('"run_id":(%d+)')
    for _, remote in ipairs { "remote-a", "remote-b" } do
      for _, f in ipairs { "parts/base.lua", "parts/tiny.lua", "acts/noisy.lua" } do
        assert.are.equal(read_file(dir .. "/" .. f), read_file(string.format("%s/%s/d3-%s/%s", dir, remote, run_id, f)),
                         remote .. ": " .. f)
      end
    end
    for _, f in ipairs { "parts/base.lua", "parts/tiny.lua", "acts/noisy.lua", "config.effective.lua" } do
      assert.truthy(read_file(dir .. "/d3/" .. f), "the run directory keeps " .. f)
    end
  end)

  it("repeats the experiment with --jobs, seeds seed, seed + 1, ... #e2e", function()
    remotes()
    local code, _, err = dispatch("-q --jobs 2 --out " .. dir .. "/jobs")
    assert.are.equal(0, code, err)
    local s1 = read_file(dir .. "/jobs/job-1/manifest.json"):match('"seed":(%d+)')
    local s2 = read_file(dir .. "/jobs/job-2/manifest.json"):match('"seed":(%d+)')
    assert.are.equal("2", s1)
    assert.are.equal("3", s2)
    assert.truthy(node_metrics(dir .. "/jobs/job-2", 3))
  end)

  it("refuses an unknown or changed host key, a wrong key and a remote without dpy-lua", function()
    write_file(dir .. "/empty_known_hosts", "")
    remotes(string.format("known_hosts = %q", dir .. "/empty_known_hosts"))
    local code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("remote 127.0.0.1 %(127.0.0.1%): 127.0.0.1:%d+: its host key SHA256:%S+ is not in "
                   .. ".*empty_known_hosts: refusing to connect", err)

    local other = read_file(keys .. "/other_key.pub")
    write_file(dir .. "/changed_known_hosts", string.format("[127.0.0.1]:%d %s", port, other))
    remotes(string.format("known_hosts = %q", dir .. "/changed_known_hosts"))
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("the host key CHANGED", err)

    remotes(string.format("identity = %q", keys .. "/other_key"))
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("authentication failed %(key .*other_key%)", err)

    remotes("backend = 'cuda'")
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("backend cuda asked, but its dpy%-lua sees no GPU %(devices: cpu", err)

    remotes("dpy_lua = '/nonexistent/dpy-lua'")
    code, _, err = dispatch("--out " .. dir .. "/x")
    assert.are.equal(1, code)
    assert.matches("dpy%-lua not found %(ran '/nonexistent/dpy%-lua'", err)
  end)

  it("stops every remote process when one dies, and collects what finished", function()
    remotes()
    write_file(dir .. "/crash.lua", [[
      local registry = require "dpy.registry"
      local host = require "dpy.host.core"
      return registry.register { kind = "action", name = "crash",
        new = function() return { pre_train = function(node, r)
          if node.uid == 3 and r == 2 then host.kill(host.pid(), 9) end end } end }
    ]])
    write_file(dir .. "/c.lua", "include 'tiny.lua'\nactions = { 'crash.lua' }\n")
    local code, _, err = dispatch("-q --out " .. dir .. "/crash")
    write_file(dir .. "/c.lua", "include 'tiny.lua'\n")
    assert.are.equal(1, code)
    assert.matches("process 2 on localhost %(localhost%) exited with 137", err)
    assert.is_true(#node_metrics(dir .. "/crash", 0).train_loss >= 1, "node 0's results came back")
    local run_id = read_file(dir .. "/crash/manifest.json"):match('"run_id":(%d+)')
    local rc = sh("pgrep -f '[-]-run-id " .. run_id .. "'")   -- [-]: not pgrep's own shell
    assert.are_not.equal(0, rc, "no process of the run is left")
  end)

  it("stops everywhere on Ctrl-C and keeps what was written #e2e", function()
    remotes()
    local long = dir .. "/long"
    sh("cd " .. dir .. " && (" .. BIN .. " dispatch c.lua --remotes remotes.lua -q --out " .. long
       .. " rounds=10000 eval_every=1 > " .. dir .. "/long.out 2>&1; echo $? > " .. dir .. "/long.code) &")
    for _ = 1, 300 do   -- until a node has finished a round
      local m = read_file(long .. "/progress-0.json")
      if m and not m:match('"round":0') then break end
      os.execute("sleep 0.1")
    end
    sh("pkill -INT -f 'dispatch c.lua --remotes remotes.lua -q --out " .. long .. "'")
    for _ = 1, 300 do
      if read_file(dir .. "/long.code") then break end
      os.execute("sleep 0.1")
    end
    assert.are.equal("130\n", read_file(dir .. "/long.code"), read_file(dir .. "/long.out"))
    assert.matches("interrupted; the results so far are in", read_file(dir .. "/long.out"))
    assert.truthy(read_file(long .. "/0.log"))
    local run_id = read_file(long .. "/manifest.json"):match('"run_id":(%d+)')
    assert.are_not.equal(0, (sh("pgrep -f '[-]-run-id " .. run_id .. "'")))
  end)
end)
