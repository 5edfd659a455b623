"""FedAdagrad (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2):
Adagrad on the server, over FedAvg's mean. Streams.

The clients' size-weighted mean is taken as FedAvg takes it, one model in memory whatever
their number; delta = mean - previous is the pseudo-gradient, and the server steps:

    m = beta1 * m + (1 - beta1) * delta
    v = v + delta^2
    x = previous + server_lr * m / (sqrt(v) + tau)

This is the paper's FedAdagrad, which has a first moment like its FedAdam and FedYogi
(Algorithm 2 uses beta1 for all three). Flower's FedAdagrad has none: pass `beta1=0` for
that (m is then delta). m starts at 0 and v at tau^2 (`v0: tau2`, the paper's v_{-1} >=
tau^2); there is no bias correction, as in the paper and in Flower. Flower's v starts at 0:
`beta1: 0, v0: zero` is Flower's FedAdagrad exactly (see soma.strategies._fedopt).

Options and defaults: `server_lr` 0.1 (Flower's eta), `beta1` 0.9 (the paper's), `tau`
1e-3 (Flower's `flwr.serverapp` FedAdagrad; in the range the paper searched, 1e-7 to 1e-1;
see soma.strategies.fedadam for why not 1e-9). There is no beta2: v only grows, so the
step shrinks as rounds go by. `v0` tau2 (default) or zero.
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
    server_lr: float = 0.1,
    beta1: float = 0.9,
    tau: float = 1e-3,
    v0: str = "tau2",
    norm_bound: float | None = None,
) -> Strategy:
    """FedAdagrad (Reddi et al. 2021): an Adagrad step on the mean's pseudo-gradient.

    Options (the config's `strategy_options.fedadagrad`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `server_lr` (0.1): the server's step along the mean's pseudo-gradient.
    - `beta1` (0.9): the first moment's decay, in [0, 1).
    - `tau` (0.001): the adaptivity's floor, > 0.
    - `v0` (`tau2`): the second moment's start, `tau2` (the paper's) or `zero` (Flower's).
    - `norm_bound` (null): clip each update to this many times the round's median update norm
      before the mean; needs every update, so no tree and no secure aggregation.
    """
    optimizer = _fedopt.ServerOptimizer(
        name="fedadagrad",
        rule="adagrad",
        server_lr=_fedopt.positive("fedadagrad", "server_lr", server_lr),
        beta1=_fedopt.fraction("fedadagrad", "beta1", beta1),
        tau=_fedopt.positive("fedadagrad", "tau", tau),
        v0=_fedopt.start_of_v("fedadagrad", v0),
    )
    return bounded(optimizer, bound_of("fedadagrad", norm_bound))
