-- Epidemic Learning, EL-Local (de Vos et al., NeurIPS 2023), over the baseline: every round each
-- node sends its model to 7 peers it draws uniformly by itself, and averages its own model with the
-- k it received that round (k varies; 1/(k + 1) each).
include "0_baseline.lua"
algorithm = { "epidemic", variant = "local", s = 7 }
