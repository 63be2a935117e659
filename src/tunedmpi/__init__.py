"""tunedmpi: measured MPI tuning tables, tuned Lmod modules and their validation."""

__version__ = "0.1.0"
