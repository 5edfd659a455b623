import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mutants  # noqa: E402

mutants.apply_from_environment()

from s3_bucket import bucket  # noqa: E402,F401  (the session's S3 server, for any test file)
from tiny_run import tiny_run  # noqa: E402,F401  (one finished tiny run, read-only)
