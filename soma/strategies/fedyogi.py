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

m starts at 0 and v at tau^2 (the paper's v_{-1} >= tau^2); there is no bias correction,
as in the paper.

Options and defaults are Flower's FedYogi's: `server_lr` 0.01 (Flower's eta for Yogi,
smaller than for Adam), `beta1` 0.9, `beta2` 0.99, `tau` 1e-3 (in the range the paper
searched, 1e-7 to 1e-1; see soma.strategies.fedadam for why not 1e-9).

The state is `{"m": {node: {key: tensor}}, "v": ...}` (float32 for half-precision keys):
the strategy holds the running mean plus it. Integer counts take the mean's value (the
first update's), never stepped.
"""

from __future__ import annotations

from soma.strategies import _fedopt


def make(
    *, server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3
) -> _fedopt.ServerOptimizer:
    return _fedopt.ServerOptimizer(
        name="fedyogi",
        rule="yogi",
        server_lr=_fedopt.positive("fedyogi", "server_lr", server_lr),
        beta1=_fedopt.fraction("fedyogi", "beta1", beta1),
        beta2=_fedopt.fraction("fedyogi", "beta2", beta2),
        tau=_fedopt.positive("fedyogi", "tau", tau),
    )
