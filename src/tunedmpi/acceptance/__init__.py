"""Stage 4: acceptance: repetition statistics and the verdict, tuned-vs-baseline validation, reports, power."""
