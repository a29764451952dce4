-- remotes.example.lua: copy to remotes.lua and edit; `dpy-lua dispatch CONFIG.lua` reads it.
-- Every remote runs `processes` node processes of the experiment; nodes are given out in
-- contiguous blocks of uids, as on one machine. Keys set in defaults apply to every remote unless
-- the remote sets its own.
return {
  defaults = {
    processes = 4,                  -- node processes per machine
    work_dir = "/tmp/dpy-runs",     -- where runs go on the remote (one directory per run)
    user = os.getenv("USER"),       -- login name (default: yours)
    port = 22,                      -- the SSH port
    identity = nil,                 -- a private key file; nil: the SSH agent, then ~/.ssh/id_*
    known_hosts = nil,              -- default ~/.ssh/known_hosts: unknown host keys are refused
    dpy_lua = "dpy-lua",            -- the dpy-lua binary on the remote (same version as here)
    backend = "cpu",                -- cpu, cuda or rocm: the libtorch build dpy_lua points at
    base_port = nil,                -- first tcp port the processes listen on (default: from the run id)
  },
  remotes = {
    { host = "node1.cluster.example" },
    { host = "node2.cluster.example", processes = 8 },
    -- address: how the other machines reach this one, when it differs from host
    { host = "gpu1.example", address = "10.0.0.21", dpy_lua = "/opt/dpy-lua/build-cuda/dpy-lua",
      backend = "cuda" },
  },
}
