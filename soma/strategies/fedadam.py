"""FedAdam (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2): Adam on
the server, over FedAvg's mean. Streams.

The clients' size-weighted mean is taken as FedAvg takes it, one model in memory whatever
their number; delta = mean - previous is the pseudo-gradient, and the server steps:

    m = beta1 * m + (1 - beta1) * delta
    v = beta2 * v + (1 - beta2) * delta^2
    x = previous + server_lr * m / (sqrt(v) + tau)

By default m starts at 0 and v at tau^2 (`v0: tau2`, the paper's v_{-1} >= tau^2), and there
is no bias correction (`bias_correction: false`), as in the paper.

How it differs from Flower's FedAdam: Flower starts v at 0 and multiplies server_lr by
sqrt(1 - beta2^(t+1)) / (1 - beta1^(t+1)), t its 1-based round. `v0: zero` and
`bias_correction: true` reproduce it exactly (see soma.strategies._fedopt for the formula
and why its exponent is one more than Adam's). The paper's is the default: with beta1 0.9
and beta2 0.99 the correction multiplies the step by 0.74 in the first round, 0.47 in the
tenth and 0.98 only after 300, a schedule the paper's tuned server_lr does not expect.

Options and defaults: `server_lr` 0.1, `beta1` 0.9, `beta2` 0.99 (Flower's FedAdam eta,
beta_1, beta_2, and the betas of the paper's experiments), and `tau` 1e-3. tau sets how
adaptive the step is: while sqrt(v) >> tau each coordinate moves by about server_lr
whatever the size of its delta, so with Flower's older default 1e-9 (`flwr.server`) a
coordinate whose delta is noise of 1e-8 moves as far as one that really changed. 1e-3 is
in the range the paper searched (1e-7 to 1e-1), and is what Flower's newer strategies
(`flwr.serverapp`) and its FedYogi default to.

Options `v0` (tau2 or zero), `bias_correction` (false or true).
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
    beta2: float = 0.99,
    tau: float = 1e-3,
    v0: str = "tau2",
    bias_correction: bool = False,
    norm_bound: float | None = None,
) -> Strategy:
    """FedAdam (Reddi et al. 2021): an Adam step on the mean's pseudo-gradient.

    Options (the config's `strategy_options.fedadam`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `server_lr` (0.1): the server's step along the mean's pseudo-gradient.
    - `beta1` (0.9): the first moment's decay, in [0, 1).
    - `beta2` (0.99): the second moment's decay, in [0, 1).
    - `tau` (0.001): the adaptivity's floor, > 0.
    - `v0` (`tau2`): the second moment's start, `tau2` (the paper's) or `zero` (Flower's).
    - `bias_correction` (false): Adam's bias correction (true with `v0: zero` is Flower's).
    - `norm_bound` (null): clip each update to this many times the round's median update norm
      before the mean; needs every update, so no tree and no secure aggregation.
    """
    optimizer = _fedopt.ServerOptimizer(
        name="fedadam",
        rule="adam",
        server_lr=_fedopt.positive("fedadam", "server_lr", server_lr),
        beta1=_fedopt.fraction("fedadam", "beta1", beta1),
        beta2=_fedopt.fraction("fedadam", "beta2", beta2),
        tau=_fedopt.positive("fedadam", "tau", tau),
        v0=_fedopt.start_of_v("fedadam", v0),
        bias_correction=_fedopt.flag("fedadam", "bias_correction", bias_correction),
    )
    return bounded(optimizer, bound_of("fedadam", norm_bound))
