"""`soma` run as a real separate process, with the test's mutant (if any) applied first."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mutants  # noqa: E402

mutants.apply_from_environment()

from soma.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
