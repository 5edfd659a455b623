"""Imported by every Python process a test starts with this folder on PYTHONPATH (snakemake
and its jobs, `soma client`): SOMA_MUTANT applies there too (tests/mutants.py), so that a
mutant of the workflow's jobs is as broken in them as in the test's own process."""

import os

if os.environ.get("SOMA_MUTANT"):
    import mutants

    mutants.apply_from_environment()
