"""Stage 2: modules: site configs, job geometry, knob-to-environment mapping, render and explain."""
