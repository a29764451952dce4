-- Asynchronous gossip over the baseline: no global rounds; each node, at its own pace, trains, pushes
-- half of its model's mass to a random neighbour of the 4-regular graph and absorbs what came
-- (push-sum, as Stochastic Gradient Push). Add stragglers = { fraction = 0.1, slowdown = 4 } to see
-- the fast nodes go on without waiting for the slow ones.
include "0_baseline.lua"
algorithm = "async"
