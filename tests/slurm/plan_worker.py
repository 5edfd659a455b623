"""`python -m snakemake ARGS` as a real process that stops at the workflow's start, before any
submission, after writing every submission it would make (soma.slurm.submissions: the sbatch
options the Slurm plugin will give each) as JSON to $SOMA_PLAN; a refusal there is said as
the run would say it. The test's mutant (if any) is applied first."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mutants  # noqa: E402

mutants.apply_from_environment()

import soma.slurm.submissions as planned  # noqa: E402


def write_plan(workflow) -> None:
    found = planned.submissions(workflow)
    rows = [{"what": request.what, "options": options} for request, options in found]
    Path(os.environ["SOMA_PLAN"]).write_text(json.dumps(rows))
    raise SystemExit(0)


planned.check = write_plan

from snakemake.cli import main  # noqa: E402

main(sys.argv[1:])
