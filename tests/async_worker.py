"""A process that makes the next version of asynchronous run "a" (buffer 1) in the store at
argv[1], saying `computing` once it holds the claim and then working for a minute: for a test
to kill it mid-version (tests/asynchronous/test_takeover.py)."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from soma.asynchronous import arithmetic, versions  # noqa: E402
from soma.config.asynchronous import Buffered  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.timing import DEADLINE  # noqa: E402

original = arithmetic.server_step


def slow(current, points, server_lr):
    print("computing", flush=True)
    time.sleep(60)
    return original(current, points, server_lr)


arithmetic.server_step = slow
made = versions.Versions(Store(sys.argv[1]), "a", Buffered(buffer=1)).advance(
    lease=1.0, deadline=DEADLINE
)
print(made, flush=True)
