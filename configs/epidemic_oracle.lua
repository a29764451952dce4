-- Epidemic Learning, EL-Oracle (de Vos et al., NeurIPS 2023), over the baseline: every round a fresh
-- random 7-regular directed graph (each node sends its model to 7 and receives from 7), derived by
-- every node alone from the seed and the round; a node averages its model with the 7 it received.
include "0_baseline.lua"
algorithm = { "epidemic", variant = "oracle", s = 7 }
