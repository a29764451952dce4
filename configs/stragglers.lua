-- Stragglers over the baseline: a seeded 10 % of the nodes compute 4 times slower, on a simulated
-- clock (a local step takes 0.05 simulated seconds, a message 5 to 20 ms per link), so the run goes
-- as fast as the CPU allows and sim_seconds reports the time the emulated network would take.
-- Add round_timeout = 1 (simulated seconds) to stop waiting for the stragglers.
include "0_baseline.lua"
stragglers = { fraction = 0.1, slowdown = 4 }
sim_clock = { step_seconds = 0.05, latency = 0.005, latency_max = 0.02 }
