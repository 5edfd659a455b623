"""`soma` run as a real separate process with a store fault planted first, for the tests of
what a fault does to a round (tests/run/test_faults.py); the test's mutant too, if any.

SOMA_PLANT="<errno name>:<name part>:<times>" makes the folder store's claim of any name
containing <name part> fail with that OS error, <times> times (0: every time): what a full
disk (ENOSPC) or an NFS server failing over (EIO) does to one client's claim.
"SLOW:<name part>:<seconds>" makes its bind of such a name take that long first (a file
server answering slowly as it comes back). Several plants are separated by commas.
"""

import errno
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mutants  # noqa: E402

mutants.apply_from_environment()


def plant(spec: str) -> None:
    import soma.store.folder

    code, part, times = spec.split(":")
    if code == "SLOW":
        slow(part, float(times))
        return
    number, left = getattr(errno, code), [int(times) or -1]
    claim = soma.store.folder.FolderStore._claim_once

    def failing(self, name, digest, *, at_commit=False):
        if part in name and left[0] != 0:
            left[0] -= 1
            raise OSError(number, os.strerror(number), name)
        return claim(self, name, digest, at_commit=at_commit)

    soma.store.folder.FolderStore._claim_once = failing


def slow(part: str, seconds: float) -> None:
    import time

    import soma.store.folder

    bind = soma.store.folder.FolderStore.bind

    def slowly(self, name, digest):
        if part in name:
            time.sleep(seconds)
        return bind(self, name, digest)

    soma.store.folder.FolderStore.bind = slowly


for spec in filter(None, os.environ.get("SOMA_PLANT", "").split(",")):
    plant(spec)

from soma.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
