import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mutants  # noqa: E402

mutants.apply_from_environment()
