-- Runs started by the launchers clusters already have: mpirun (Open MPI from Debian) and the
-- environment srun (Slurm) gives each task.
local BIN = shell_quote(DPY_BIN)

local function same_numbers(a, b)
  for uid = 0, 3 do
    assert.are.same(node_metrics(a, uid).test_accuracy, node_metrics(b, uid).test_accuracy, "node " .. uid)
  end
end

describe("launchers #e2e", function()
  local dir, reference
  setup(function()
    dir = tmpdir()
    write_file(dir .. "/c.lua", TINY_RUN)
    local code, _, err = sh(BIN .. " run " .. dir .. "/c.lua processes=4 --out " .. dir .. "/reference")
    assert.are.equal(0, code, err)
    reference = dir .. "/reference"
  end)

  it("mpirun -np 4 runs the nodes, the same numbers as dpy-lua run", function()
    local code, out, err = sh("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 "
                              .. "--oversubscribe " .. BIN .. " node " .. dir .. "/c.lua --dir " .. dir .. "/mpi")
    assert.are.equal(0, code, err)
    assert.matches("results in " .. dir .. "/mpi", out)
    same_numbers(reference, dir .. "/mpi")
    local manifest = read_file(dir .. "/mpi/manifest.json")
    assert.matches('"launcher":"mpirun %(Open MPI%)"', manifest)
    assert.matches('"processes":4', manifest)
  end)

  it("reads srun's task variables, and names the ranks that never arrive", function()
    local procs = {}
    for r = 0, 3 do
      procs[#procs + 1] = string.format("SLURM_PROCID=%d SLURM_NTASKS=4 SLURM_JOB_ID=77 %s node %s/c.lua "
                                        .. "--dir %s/slurm", r, BIN, dir, dir)
    end
    local code, _, err = sh("(" .. table.concat(procs, " & ") .. " & wait) 2>&1")
    assert.are.equal(0, code, err)
    same_numbers(reference, dir .. "/slurm")
    assert.matches('"launcher":"srun %(Slurm%)"', read_file(dir .. "/slurm/manifest.json"))

    local rc, _, e = sh("DPY_RENDEZVOUS_TIMEOUT=1 SLURM_PROCID=1 SLURM_NTASKS=2 " .. BIN .. " node " .. dir
                        .. "/c.lua --dir " .. dir .. "/alone")
    assert.are.equal(1, rc)
    assert.matches("rendezvous in .*/alone/rendezvous: rank%(s%) 0 never arrived after 1 s %(is .*/alone one "
                   .. "directory that every process sees%?%)", e)
  end)
end)
