"""One client of a secure sum, as a real separate process, for tests/secagg/test_secagg.py.

    python tests/secagg_worker.py <store> <prefix> <mine> <members> <threshold> <deadline> <how>

`how` is `full` (secure_sum; prints the total and the published record's contributors as
JSON) or `die-after-share` (advertises and shares, then dies without a word, as a killed job
would). The client's export and size are `export_of(mine)` and `size_of(mine)`, which the test
imports to compute what the sum must be. Applies SOMA_MUTANT like the test process does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import mutants  # noqa: E402
import torch  # noqa: E402

mutants.apply_from_environment()
torch.set_num_threads(1)


def export_of(client: int) -> dict[str, dict[str, torch.Tensor]]:
    """A tiny two-layer network's weights, different for every client."""
    g = torch.Generator().manual_seed(1000 + client)
    return {
        "hidden": {"weight": torch.randn(16, 8, generator=g), "bias": torch.randn(16, generator=g)},
        "out": {"weight": torch.randn(4, 16, generator=g), "bias": torch.randn(4, generator=g)},
    }


def size_of(client: int) -> int:
    return [30, 11, 57, 8, 23, 40, 5, 16][client % 8] + client // 8


def main(argv: list[str]) -> int:
    from soma.secagg import Session, advertise, published, secure_sum, share
    from soma.store import Store
    from soma.timing import LEASE

    directory, prefix, mine, members, threshold, deadline, how = argv
    store = Store(directory)
    mine_k, members_k = int(mine), [int(m) for m in members.split(",")]
    if how == "die-after-share":
        session = Session(prefix, tuple(members_k), int(threshold))
        secrets = advertise(store, session, mine_k)
        share(store, session, secrets, deadline=float(deadline))
        os._exit(3)  # no cleanup, no message: a job killed after sharing
    _, total = secure_sum(
        store,
        prefix,
        export_of(mine_k),
        size_of(mine_k),
        mine=mine_k,
        members=members_k,
        threshold=int(threshold),
        deadline=float(deadline),
        lease=LEASE,
    )
    record = published(store, prefix)
    assert record is not None
    print(json.dumps({"total": total, "contributors": record["contributors"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
