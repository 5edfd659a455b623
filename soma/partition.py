"""Splitting a labelled training set among clients: pure numpy, deterministic from a seed.

For task authors: a task's `shard(client, clients)` can be `labels[...]`-indexed by
`partition(labels, clients, scheme, ...)[client]` (compute it once per client count and
cache it: see soma/tasks/digits.py), with the scheme and its parameters as task options.

`partition(labels, clients, scheme, ...)` returns one sorted index array per client; together
they cover every example exactly once (disjoint, union = all), and no client is empty. A
client left with fewer than `min_size` examples (default 1; a task that trains on minibatches
wants 2 or more) is refused, naming the client and the option, before any client trains. The
schemes:

- `iid`: a seeded shuffle cut into `clients` nearly equal parts.
- `dirichlet`: for each class, proportions over the clients drawn from Dirichlet(`alpha`, ...,
  `alpha`); small `alpha` (0.1) gives each client a few dominant classes, large `alpha` (100)
  is close to iid. A client left empty by the draw takes one example from the largest client.
- `labels_per_client`: each client holds exactly `labels_per_client` distinct classes (a seeded
  permutation of the classes, dealt cyclically: client k holds positions k*n, ..., k*n + n - 1
  modulo the number of classes), and each class's examples are shared equally among the
  clients holding it. Every class must be held by someone, so clients * labels_per_client must
  be at least the number of classes (10 clients x 2 labels covers 10 digits exactly twice).
- `quantity`: quantity skew, labels iid: a seeded shuffle cut into parts whose sizes are in
  proportions drawn from Dirichlet(`alpha`, ..., `alpha`); small `alpha` (0.5) gives a few
  large clients and many small ones, large `alpha` (100) nearly equal sizes. A client left
  empty by the draw takes one example from the largest client.

The same (labels, clients, scheme, parameters, seed) give the same partition in every process
(numpy's `Generator`, PCG64, with one numpy installation).
"""

from __future__ import annotations

import numbers

import numpy as np

from soma.errors import SomaError

SCHEMES = ("iid", "dirichlet", "labels_per_client", "quantity")


class PartitionError(SomaError, ValueError):
    """A partition cannot be made as asked; the message names the option at fault."""


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check(
    scheme: str,
    *,
    alpha: float = 0.5,
    labels_per_client: int = 2,
    classes: int | None = None,
) -> None:
    """Refuse bad partition options by name, before any data is touched."""
    if scheme not in SCHEMES:
        raise PartitionError(f"partition {scheme!r} is unknown; choose one of {', '.join(SCHEMES)}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise PartitionError(f"alpha must be a number > 0, not {alpha!r}")
    if not np.isfinite(float(alpha)) or float(alpha) <= 0:
        raise PartitionError(f"alpha must be a finite number > 0, not {alpha!r}")
    if not _is_int(labels_per_client) or labels_per_client < 1:
        raise PartitionError(
            f"labels_per_client must be an integer >= 1, not {labels_per_client!r}"
        )
    if scheme == "labels_per_client" and classes is not None and labels_per_client > classes:
        raise PartitionError(
            f"labels_per_client={labels_per_client} is more than the {classes} classes there are"
        )


def partition(
    labels: np.ndarray,
    clients: int,
    scheme: str = "iid",
    *,
    alpha: float = 0.5,
    labels_per_client: int = 2,
    seed: int = 0,
    min_size: int = 1,
) -> list[np.ndarray]:
    """One sorted index array per client: disjoint, covering every example, none with fewer
    than `min_size` examples (refused, naming the first such client)."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise PartitionError(f"labels must be one-dimensional, not of shape {labels.shape}")
    classes = np.unique(labels)
    check(scheme, alpha=alpha, labels_per_client=labels_per_client, classes=len(classes))
    if not _is_int(clients) or clients < 1:
        raise PartitionError(f"clients must be an integer >= 1, not {clients!r}")
    if clients > len(labels):
        raise PartitionError(
            f"clients={clients} is more than the {len(labels)} examples: some would be empty"
        )
    if not _is_int(seed) or seed < 0:
        raise PartitionError(f"seed must be an integer >= 0, not {seed!r}")
    if not _is_int(min_size) or min_size < 1:
        raise PartitionError(f"min_size must be an integer >= 1, not {min_size!r}")
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        parts = np.array_split(rng.permutation(len(labels)), clients)
    elif scheme == "dirichlet":
        parts = _dirichlet(labels, classes, clients, float(alpha), rng)
    elif scheme == "quantity":
        parts = _quantity(len(labels), clients, float(alpha), rng)
    else:
        parts = _labels_per_client(labels, classes, clients, int(labels_per_client), rng)
    _check_min_size(parts, min_size, scheme, alpha)
    return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]


def _check_min_size(parts: list[np.ndarray], min_size: int, scheme: str, alpha: float) -> None:
    """Refuse a client left with fewer than `min_size` examples, naming it and the options."""
    for client, part in enumerate(parts):
        if len(part) < min_size:
            skewed = scheme in ("dirichlet", "quantity")
            raise PartitionError(
                f"client {client} would hold {len(part)} example{'s' * (len(part) != 1)}, "
                f"fewer than min_size={min_size}: "
                + (f"raise alpha (now {alpha}), " if skewed else "")
                + "use fewer clients, or lower min_size"
            )


def _quantity(
    examples: int, clients: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    shares = rng.dirichlet(np.full(clients, alpha))
    cuts = np.floor(np.cumsum(shares)[:-1] * examples).astype(np.int64)
    return _none_empty(list(np.split(rng.permutation(examples), cuts)), rng)


def _none_empty(parts: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Each empty client takes one example (chosen by the seed) from the largest."""
    for client in range(len(parts)):
        if len(parts[client]) == 0:
            donor = int(np.argmax([len(p) for p in parts]))
            taken = int(rng.integers(len(parts[donor])))
            parts[client] = parts[donor][taken : taken + 1]
            parts[donor] = np.delete(parts[donor], taken)
    return parts


def _dirichlet(
    labels: np.ndarray, classes: np.ndarray, clients: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    pieces: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for label in classes:
        members = rng.permutation(np.flatnonzero(labels == label))
        shares = rng.dirichlet(np.full(clients, alpha))
        cuts = np.floor(np.cumsum(shares)[:-1] * len(members)).astype(np.int64)
        for client, piece in enumerate(np.split(members, cuts)):
            pieces[client].append(piece)
    return _none_empty([np.concatenate(p) for p in pieces], rng)


def _labels_per_client(
    labels: np.ndarray, classes: np.ndarray, clients: int, n: int, rng: np.random.Generator
) -> list[np.ndarray]:
    if clients * n < len(classes):
        raise PartitionError(
            f"labels_per_client={n} with {clients} clients holds only {clients * n} of the "
            f"{len(classes)} classes; the rest would belong to no client "
            f"(need clients * labels_per_client >= {len(classes)})"
        )
    order = rng.permutation(classes)
    held = [[order[(client * n + j) % len(classes)] for j in range(n)] for client in range(clients)]
    pieces: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for label in classes:
        holders = [client for client in range(clients) if label in held[client]]
        members = rng.permutation(np.flatnonzero(labels == label))
        if len(members) < len(holders):
            raise PartitionError(
                f"class {label.item()!r} has {len(members)} examples for {len(holders)} clients "
                f"holding it: too many clients for labels_per_client={n}"
            )
        for client, piece in zip(holders, np.array_split(members, len(holders)), strict=True):
            pieces[client].append(piece)
    return [np.concatenate(p) for p in pieces]
