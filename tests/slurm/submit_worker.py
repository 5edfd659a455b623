"""`python -m snakemake ARGS` as a real separate process, with the test's mutant (if any)
applied first: a mutant of the soma-slurm executor reaches the main process, which submits."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mutants  # noqa: E402

mutants.apply_from_environment()

from snakemake.cli import main  # noqa: E402

main(sys.argv[1:])
