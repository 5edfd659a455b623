"""FedAvgM (Hsu, Qi and Brown 2019, "Measuring the Effects of Non-Identical Data
Distribution for Federated Visual Classification"): FedAvg with server momentum. Streams.

The clients' size-weighted mean is taken as FedAvg takes it, one model in memory whatever
their number; its distance from the round's starting weights, delta = mean - previous, is
a pseudo-gradient, and the server keeps a heavy-ball momentum buffer of it:

    m = momentum * m + delta            (m = 0 before the first round)
    x = previous + server_lr * m

Options: `server_lr` (default 1.0, Flower's FedAvgM's: a step of the whole mean) and
`momentum` in [0, 1) (default 0.9, the usual heavy-ball value; Flower's default is 0, which
is plain FedAvg and so no reason to choose this strategy). A steady delta is then stepped
by up to server_lr / (1 - momentum), ten times the mean's: lower server_lr if it overshoots.
With momentum 0 and server_lr 1 the result is FedAvg's, bit for bit.

`norm_bound` (default null, off): clip each update to that multiple of the round's median
update norm before the mean (soma.strategies._norm_bound); the strategy then cannot step
from the mean alone (no tree, no secure aggregation).

The state is the buffer, `{"m": {node: {key: tensor}}}`: the strategy holds the running
mean plus it. Integer counts take the mean's value (the first update's), never stepped.
"""

from __future__ import annotations

from soma.strategies import Strategy, _fedopt
from soma.strategies._norm_bound import bound_of, bounded


def make(
    *, server_lr: float = 1.0, momentum: float = 0.9, norm_bound: float | None = None
) -> Strategy:
    """FedAvg with server momentum (Hsu et al. 2019).

    Options (the config's `strategy_options.fedavgm`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `server_lr` (1.0): the server's step along the momentum (1.0 is a step of the whole mean).
    - `momentum` (0.9): the momentum's decay, in [0, 1).
    - `norm_bound` (null): clip each update to this many times the round's median update norm
      before the mean; needs every update, so no tree and no secure aggregation.
    """
    optimizer = _fedopt.ServerOptimizer(
        name="fedavgm",
        rule="momentum",
        server_lr=_fedopt.positive("fedavgm", "server_lr", server_lr),
        momentum=_fedopt.fraction("fedavgm", "momentum", momentum),
    )
    return bounded(optimizer, bound_of("fedavgm", norm_bound))
