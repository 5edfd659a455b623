"""FedAdam (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2): Adam on
the server, over FedAvg's mean. Streams.

The clients' size-weighted mean is taken as FedAvg takes it, one model in memory whatever
their number; delta = mean - previous is the pseudo-gradient, and the server steps:

    m = beta1 * m + (1 - beta1) * delta
    v = beta2 * v + (1 - beta2) * delta^2
    x = previous + server_lr * m / (sqrt(v) + tau)

m starts at 0 and v at tau^2 (the paper's v_{-1} >= tau^2). There is no bias correction,
as in the paper (Flower's FedAdam adds one; Adam's own does).

Options and defaults: `server_lr` 0.1, `beta1` 0.9, `beta2` 0.99 (Flower's FedAdam eta,
beta_1, beta_2, and the betas of the paper's experiments), and `tau` 1e-3. tau sets how
adaptive the step is: while sqrt(v) >> tau each coordinate moves by about server_lr
whatever the size of its delta, so with Flower's older default 1e-9 (`flwr.server`) a
coordinate whose delta is noise of 1e-8 moves as far as one that really changed. 1e-3 is
in the range the paper searched (1e-7 to 1e-1), and is what Flower's newer strategies
(`flwr.serverapp`) and its FedYogi default to.

The state is `{"m": {node: {key: tensor}}, "v": ...}` (float32 for half-precision keys):
the strategy holds the running mean plus it. Integer counts take the mean's value (the
first update's), never stepped.
"""

from __future__ import annotations

from soma.strategies import _fedopt


def make(
    *, server_lr: float = 0.1, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3
) -> _fedopt.ServerOptimizer:
    return _fedopt.ServerOptimizer(
        name="fedadam",
        rule="adam",
        server_lr=_fedopt.positive("fedadam", "server_lr", server_lr),
        beta1=_fedopt.fraction("fedadam", "beta1", beta1),
        beta2=_fedopt.fraction("fedadam", "beta2", beta2),
        tau=_fedopt.positive("fedadam", "tau", tau),
    )
