"""Claim a name in a store as this process, then sleep until killed (for
tests/slurm/test_slurm_faults.py).

    python tests/slurm/hold_claim.py STORE NAME [ROLE]

Run as a Slurm job, it is an averager that claimed a round's averaging and died holding it
once scancel'ed: its holder record (`soma.round.holders.me`) carries its host, pid and
$SLURM_JOB_ID, which is what lets others prove it gone. Prints one JSON line: whether it won
the claim, and its record. Exits 1 at once when somebody else holds the name.
"""

from __future__ import annotations

import json
import sys
import time

from soma.round import holders
from soma.store import Store


def main(argv: list[str]) -> int:
    store, name = Store(argv[0]), argv[1]
    me = holders.me(role=argv[2] if len(argv) > 2 else "averaging")
    won = store.claim(name, store.put_value(me))
    print(json.dumps({"claimed": won, "name": name, "holder": me}, sort_keys=True), flush=True)
    if not won:
        return 1
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
