"""FedYogi (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2): Yogi on
the server, over FedAvg's mean. Streams.

The clients' size-weighted mean is taken as FedAvg takes it, one model in memory whatever
their number; delta = mean - previous is the pseudo-gradient, and the server steps:

    m = beta1 * m + (1 - beta1) * delta
    v = v - (1 - beta2) * delta^2 * sign(v - delta^2)
    x = previous + server_lr * m / (sqrt(v) + tau)

When the deltas get small after large ones, Adam's v forgets the large ones geometrically
and the step grows fast; Yogi's v shrinks by at most (1 - beta2) * delta^2 a round, so the
step grows slowly (Zaheer et al. 2018, where Yogi comes from).

m starts at 0 and v at tau^2 (`v0: tau2`, the default: the paper's v_{-1} >= tau^2); there is
no bias correction, as in the paper and in Flower's FedYogi.

How it differs from Flower's FedYogi: only where v starts. Flower starts v at 0; pass
`v0: zero` to reproduce it (see soma.strategies._fedopt). The default stays the paper's
tau^2, so that a coordinate whose delta is far below tau is not moved by about server_lr
in the first round as it is from 0.

Options and defaults: `server_lr` 0.01 (Flower's eta for Yogi, smaller than for Adam),
`beta1` 0.9, `beta2` 0.99, `tau` 1e-3 (Flower's; in the range the paper searched, 1e-7 to
1e-1; see soma.strategies.fedadam for why not 1e-9), `v0` tau2 (the paper's; Flower's is
zero).
`norm_bound` (default null, off): clip each update to that multiple of the round's median
update norm before the mean (soma.strategies._norm_bound); the strategy then cannot step
from the mean alone (no tree, no secure aggregation).

The state is `{"m": {node: {key: tensor}}, "v": ...}` (float32 for half-precision keys):
the strategy holds the running mean plus it. Integer counts take the mean's value (the
first update's), never stepped.
"""

from __future__ import annotations

from soma.strategies import Strategy, _fedopt
from soma.strategies._norm_bound import bound_of, bounded


def make(
    *,
    server_lr: float = 0.01,
    beta1: float = 0.9,
    beta2: float = 0.99,
    tau: float = 1e-3,
    v0: str = "tau2",
    norm_bound: float | None = None,
) -> Strategy:
    """FedYogi (Reddi et al. 2021): a Yogi step on the mean's pseudo-gradient.

    Options (the config's `strategy_options.fedyogi`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `server_lr` (0.01): the server's step along the mean's pseudo-gradient.
    - `beta1` (0.9): the first moment's decay, in [0, 1).
    - `beta2` (0.99): the second moment's decay, in [0, 1).
    - `tau` (0.001): the adaptivity's floor, > 0.
    - `v0` (`tau2`): the second moment's start, `tau2` (the paper's) or `zero` (Flower's).
    - `norm_bound` (null): clip each update to this many times the round's median update norm
      before the mean; needs every update, so no tree and no secure aggregation.
    """
    optimizer = _fedopt.ServerOptimizer(
        name="fedyogi",
        rule="yogi",
        server_lr=_fedopt.positive("fedyogi", "server_lr", server_lr),
        beta1=_fedopt.fraction("fedyogi", "beta1", beta1),
        beta2=_fedopt.fraction("fedyogi", "beta2", beta2),
        tau=_fedopt.positive("fedyogi", "tau", tau),
        v0=_fedopt.start_of_v("fedyogi", v0),
    )
    return bounded(optimizer, bound_of("fedyogi", norm_bound))
