"""A second interpreter for the store's tests (tests/store/test_store_processes.py, and the
contract's races): it trains, races and gets killed for real.

    python tests/store_worker.py train <store> <name> <seed> <out.safetensors>
    python tests/store_worker.py race <store> <name> <go-fd> <racers>
    python tests/store_worker.py write <store>

Applies SOMA_MUTANT like the test process does, so a racing child is as broken as its
parent.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import mutants  # noqa: E402
import torch  # noqa: E402

from soma.store import Store  # noqa: E402

mutants.apply_from_environment()
torch.set_num_threads(1)


def train(store: Store, name: str, seed: int, out: str) -> None:
    """A few SGD steps of a small net, kept with its size, and saved by safetensors too."""
    from safetensors.torch import save_file

    from soma.nodes import export

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = torch.randn(64, 8), torch.randint(0, 3, (64,))
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    weights = export({"net": model})
    digest = store.keep(name, {"export": weights, "size": len(inputs)})
    save_file(weights["net"], out)  # a second channel, not through the store
    print(json.dumps({"digest": digest, "keys": sorted(weights["net"])}), flush=True)


def race(directory: str, name: str, go: int, racers: int) -> None:
    """Fork `racers` processes; each puts its own digest, says ready, waits for the start
    (EOF on `go`, when the parent test closes the other end), claims, and reports.

    Forked from this one interpreter (torch imported once) rather than started as eight:
    eight separate processes all the same, each with its own Store, pid and temporaries.
    """
    sys.stdout.flush()
    children = []
    for _ in range(racers):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                store = Store(directory)
                me = store.put(f"{socket.gethostname()}/{os.getpid()}".encode())
                os.write(1, b"ready\n")
                os.read(go, 1)  # every racer wakes when the parent closes the other end
                won = store.claim(name, me)
                os.write(1, (json.dumps({"digest": me, "won": won}) + "\n").encode())
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    if failed:
        raise SystemExit(f"racers {failed} failed")


def write(store: Store) -> None:
    """Keep ever new 64 MB values until killed; say which one is about to be written."""
    big = torch.rand(16 << 20)
    for i in range(10**6):
        big[0] = i  # a new blob each time
        print(f"writing {i}", flush=True)
        store.keep(f"kill/{i}", {"weights": {"w": big}, "i": i})


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "train":
        train(Store(argv[1]), argv[2], int(argv[3]), argv[4])
    elif command == "race":
        race(argv[1], argv[2], int(argv[3]), int(argv[4]))
    elif command == "write":
        write(Store(argv[1]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
