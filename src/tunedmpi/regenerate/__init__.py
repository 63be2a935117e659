"""Stage 5: regenerate: knob spaces, sweeps, ingest of raw logs, the tuner and its choice rules, regret."""
