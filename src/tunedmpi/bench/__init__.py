"""IMB and OSU benchmarks, and the probes that stand in for them: finding, running, parsing output."""
