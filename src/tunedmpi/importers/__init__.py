"""One-off importers: each turns one outside document into a tuning table. They sit beside the
engine, not in its stages: only cli.py (`tunedmpi import-seed`) imports them, and no stage may
(tests/test_layout.py). seed000: the OCI Open MPI 5.0.6 study that seeded
tuning-tables/oci-bm-optimized3.36/."""
