-- require through the process's cache of compiled modules (host/lua/chunks.c): a module loads as
-- from its file, with its file's name and lines in errors, and a changed file is compiled afresh;
-- where a framework module (dpy.*) lies is remembered, but a module gone is looked for again.
describe("require (modules compiled once per process)", function()
  local dir, saved_path
  before_each(function()
    dir = tmpdir()
    saved_path = package.path
    package.path = dir .. "/?.lua;" .. package.path
  end)
  after_each(function()
    package.path = saved_path
    for _, m in ipairs { "chunks_a", "chunks_bad", "chunks_err", "dpy.chunks_moved", "chunks_locals",
                         "dpy.chunks_locals" } do
      package.loaded[m] = nil
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  local function fresh(name)
    package.loaded[name] = nil
    return require(name)
  end

  it("loads a module with its name and file, again and again, and sees a changed file", function()
    write_file(dir .. "/chunks_a.lua", "local name, file = ...\nreturn { v = 1, name = name, file = file }\n")
    local m = fresh("chunks_a")
    assert.same({ v = 1, name = "chunks_a", file = dir .. "/chunks_a.lua" }, m)
    assert.equal(1, fresh("chunks_a").v)   -- from the cache
    write_file(dir .. "/chunks_a.lua", "return { v = 22 }\n")
    assert.equal(22, fresh("chunks_a").v)
  end)

  it("keeps the file's name and lines in a runtime error", function()
    write_file(dir .. "/chunks_err.lua", "local M = {}\n\nfunction M.f()\n  error('boom')\nend\nreturn M\n")
    fresh("chunks_err")
    local m = fresh("chunks_err")   -- the cached copy
    local ok, err = pcall(m.f)
    assert.is_false(ok)
    assert.equal(dir .. "/chunks_err.lua:4: boom", err)
    assert.equal("@" .. dir .. "/chunks_err.lua", debug.getinfo(m.f, "S").source)
  end)

  it("says what Lua says of a file that does not compile, and of a module not found", function()
    write_file(dir .. "/chunks_bad.lua", "return {\n")
    local ok, err = pcall(require, "chunks_bad")
    assert.is_false(ok)
    assert.truthy(err:find("error loading module 'chunks_bad' from file '" .. dir .. "/chunks_bad.lua':", 1, true))
    assert.truthy(err:find("chunks_bad.lua:2:", 1, true))
    ok, err = pcall(require, "chunks_none")
    assert.is_false(ok)
    assert.truthy(err:find("module 'chunks_none' not found:", 1, true))
    assert.truthy(err:find("no file '" .. dir .. "/chunks_none.lua'", 1, true))
  end)

  it("looks for a framework module again when its file is gone, and sees a changed one", function()
    local later = tmpdir()
    os.execute("mkdir -p '" .. dir .. "/dpy' '" .. later .. "/dpy'")
    package.path = package.path .. ";" .. later .. "/?.lua"
    write_file(dir .. "/dpy/chunks_moved.lua", "return { v = 1 }\n")
    write_file(later .. "/dpy/chunks_moved.lua", "return { v = 2 }\n")
    assert.equal(1, fresh("dpy.chunks_moved").v)
    write_file(dir .. "/dpy/chunks_moved.lua", "return { v = 11 }\n")
    assert.equal(11, fresh("dpy.chunks_moved").v)
    os.remove(dir .. "/dpy/chunks_moved.lua")
    local m, file = fresh("dpy.chunks_moved")
    assert.equal(2, m.v)
    assert.equal(later .. "/dpy/chunks_moved.lua", file)
    os.execute("rm -rf '" .. later .. "'")
    local ok, err = pcall(fresh, "dpy.chunks_moved")
    assert.is_false(ok)
    assert.truthy(err:find("module 'dpy.chunks_moved' not found:", 1, true))
  end)

  -- host.module_file: what the registry asks for a component's file, from the searcher's memory
  it("gives the file of a framework module as require finds it, and looks again when it is gone", function()
    local host = require "dpy.host.core"
    local later = tmpdir()
    os.execute("mkdir -p '" .. dir .. "/dpy' '" .. later .. "/dpy'")
    package.path = package.path .. ";" .. later .. "/?.lua"
    write_file(dir .. "/dpy/chunks_moved.lua", "return { v = 1 }\n")
    write_file(later .. "/dpy/chunks_moved.lua", "return { v = 2 }\n")
    assert.equal(dir .. "/dpy/chunks_moved.lua", host.module_file("dpy.chunks_moved"))
    assert.equal(dir .. "/dpy/chunks_moved.lua", select(2, fresh("dpy.chunks_moved")))
    os.remove(dir .. "/dpy/chunks_moved.lua")
    assert.equal(later .. "/dpy/chunks_moved.lua", host.module_file("dpy.chunks_moved"))
    -- put back ahead, it is not seen: the place remembered is where require loads from too
    write_file(dir .. "/dpy/chunks_moved.lua", "return { v = 1 }\n")
    assert.equal(later .. "/dpy/chunks_moved.lua", host.module_file("dpy.chunks_moved"))
    assert.equal(later .. "/dpy/chunks_moved.lua", select(2, fresh("dpy.chunks_moved")))
    os.remove(dir .. "/dpy/chunks_moved.lua")
    os.execute("rm -rf '" .. later .. "'")
    assert.is_nil(host.module_file("dpy.chunks_moved"))
    assert.is_nil(host.module_file("dpy.chunks_none"))
    assert.matches("/lua/dpy/models/cnn%.lua$", host.module_file("dpy.models.cnn"))
    local ok, err = pcall(host.module_file, "chunks_a")
    assert.is_false(ok)
    assert.matches("not a framework module", err)
  end)

  -- A node's ~25 framework modules held ~2,000 local names: half the strings its state interned
  -- while loading them (strip_locals.c).
  it("loads the framework's modules without their locals' names, a user's module with them", function()
    os.execute("mkdir -p '" .. dir .. "/dpy'")
    local src = "local M = {}\nlocal up = 2\nfunction M.f(a, b)\n  local c = a + b + up\n  return c.x\nend\nreturn M\n"
    write_file(dir .. "/dpy/chunks_locals.lua", src)
    write_file(dir .. "/chunks_locals.lua", src)
    for _ = 1, 2 do   -- compiled in this state, then from the process's cache: the same
      local m = fresh("dpy.chunks_locals")
      assert.is_nil(debug.getlocal(m.f, 1))
      assert.equal("up", (debug.getupvalue(m.f, 1)))   -- upvalues keep their names, lines stay
      assert.matches("/dpy/chunks_locals%.lua:5: attempt to index a number value$", select(2, pcall(m.f, 1, 2)))
    end
    local m = fresh("chunks_locals")
    assert.equal("a", debug.getlocal(m.f, 1))
    assert.matches("/chunks_locals%.lua:5: attempt to index a number value %(local 'c'%)$", select(2, pcall(m.f, 1, 2)))
    assert.is_nil(debug.getlocal(require("dpy.options").check, 1))
  end)

  -- Lua's own strip (string.dump(f, true)) drops the local names too: every framework module's
  -- chunk from the cache must then be byte for byte the chunk compiled from its file.
  it("drops nothing but the local names from any framework module", function()
    local p = io.popen("cd '" .. REPO .. "/lua' && find dpy -name '*.lua' | sort")
    local count, shorter = 0, 0
    for file in p:lines() do
      local name = file:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      local loader = package.searchers[2](name)
      assert.equal("function", type(loader), name)
      local full = assert(loadfile(REPO .. "/lua/" .. file))
      assert.equal(string.dump(full, true), string.dump(loader, true), name)
      count = count + 1
      if #string.dump(loader) < #string.dump(full) then shorter = shorter + 1 end
    end
    p:close()
    assert.is_true(count > 50 and shorter > 0.9 * count, count .. " modules, " .. shorter .. " without local names")
  end)

  it("finds lua-cjson without searching any path (it is linked in)", function()
    local path, cpath, loaded = package.path, package.cpath, package.loaded.cjson
    package.path, package.cpath, package.loaded.cjson = "", "", nil
    local ok, cjson = pcall(require, "cjson")
    package.path, package.cpath, package.loaded.cjson = path, cpath, loaded
    assert.is_true(ok, cjson)
    assert.equal('{"a":[1,2]}', cjson.encode({ a = { 1, 2 } }))
  end)

  it("does not look for the framework's modules in a config's directory", function()
    local conf = tmpdir()   -- not on package.path, as dir is
    os.execute("mkdir -p '" .. conf .. "/dpy'")
    write_file(conf .. "/dpy/mixing.lua", "return { shadow = true }\n")
    write_file(conf .. "/cfg.lua", 'include "' .. REPO .. '/configs/0_baseline.lua"\nrounds = 1\n')
    require("dpy.config").load(conf .. "/cfg.lua")
    local saved = package.loaded["dpy.mixing"]
    package.loaded["dpy.mixing"] = nil
    local ok, m, file = pcall(require, "dpy.mixing")
    package.loaded["dpy.mixing"] = saved
    assert.is_true(ok, m)
    assert.is_nil(m.shadow)
    assert.equal(REPO .. "/lua/dpy/mixing.lua", file)
  end)
end)
