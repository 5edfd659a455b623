"""Client-level differential privacy (DP-FedAvg, McMahan et al. 2018): the arithmetic and the
accountant. Pure: tensors and numbers in, tensors and numbers out; nothing read or written.

An *update* is export-shaped, `{node: {key: tensor}}`: a client's weights minus the round's
start. Its coordinates are its real floating-point tensors, all nodes together; integer and
bool tensors are counts (BatchNorm's `num_batches_tracked`), never clipped, never noised,
never in the norm: they pass through as they are. A complex tensor is refused (its noise
would need a convention of its own, and nothing in soma trains one).

- `clip`: the whole update scaled so that its L2 norm (over every float of every node, one
  vector) is at most the bound, so that one client moves the sum by at most the bound,
  whatever it trained on. Clipping node by node would let it move it by bound x sqrt(nodes).
- `noise_std`: the Gaussian noise on the mean of `m` clipped updates, z C / m: the sum's
  sensitivity is C, its noise z C, and the mean divides both by the fixed m.
- `share_std`: distributed DP, each of the m clients' share, z C / sqrt(m): m independent
  shares add up to the central z C.
- `generator` and `gaussian`: the noise, drawn from a `torch.Generator` seeded by the SHA-256
  of (seed, what it is for): a rerun round draws the same bits. The noise is only as secret
  as the seed: whoever knows it can draw the noise again and take it off. `seed=None` draws
  the generator's seed from the operating system instead (private, not reproducible).
- Adaptive clipping (Andrew et al. 2021): `update_multiplier` and `next_clip`.
- The accountant: `epsilon` (one configuration, `rounds` times), `epsilon_of` (a history of
  configurations, for a run whose noise or participation changed), `noise_for_epsilon` (its
  inverse, by bisection). Each round is `PoissonSampledDpEvent(q, GaussianDpEvent(z))` under
  add-or-remove-one adjacency, composed by `dp_accounting`'s RDP accountant by default: it is
  the moments accountant of McMahan et al. and Andrew et al., so figures compare with theirs;
  it is closed-form and takes well under a millisecond (the bisection and the budget check,
  done by every process that finds a round ready, are free); and it is an upper bound, about
  10% above the tighter PLD accountant's (`accountant="pld"`, 20-500 ms a call): the safe
  side. soma samples a fixed count of clients per round, without replacement, where the
  accountant assumes Poisson sampling: at full participation (q = 1) the two are the same
  thing; below it, this is the customary approximation (TF Privacy makes it too).
- `spent`: what a state says was spent, for `soma status` and the summary.

`dp_accounting` is an optional dependency (`pip install 'soma[privacy]'`), imported only when
an epsilon is asked for.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import numbers
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from soma.arithmetic import working_dtype
from soma.errors import SomaError

Tensors = Mapping[str, Mapping[str, torch.Tensor]]
TensorMap = dict[str, dict[str, torch.Tensor]]
# One stretch of a run's history: (noise multiplier, sampling rate, rounds).
Stretch = tuple[float, float, int]

ACCOUNTANTS = ("rdp", "pld")
INSTALL = "pip install 'soma[privacy]' (or pip install dp-accounting)"


class PrivacyError(SomaError):
    """A privacy computation asked with arguments it cannot take, or without its accountant."""


# --- clipping --------------------------------------------------------------------------------


def is_coordinate(tensor: torch.Tensor) -> bool:
    """Whether a tensor is part of the update that DP clips and noises (a real float), or a
    count that passes through (integer, bool). A complex tensor is refused by name."""
    return tensor.dtype.is_floating_point


def _coordinates(update: Tensors) -> list[tuple[str, str, torch.Tensor]]:
    found = []
    for node, keys in update.items():
        for key, tensor in keys.items():
            if tensor.dtype.is_complex:
                raise PrivacyError(
                    f"node {node!r} key {key!r} is {tensor.dtype}: differential privacy here "
                    "clips and noises real floats only"
                )
            if is_coordinate(tensor):
                found.append((node, key, tensor))
    return found


def l2_norm(update: Tensors) -> float:
    """The L2 norm of every float of every node together (accumulated in float64)."""
    squares = [
        float(torch.linalg.vector_norm(t.to(torch.float64))) ** 2
        for _, _, t in _coordinates(update)
    ]
    return math.sqrt(math.fsum(squares))


def clip(update: Tensors, bound: float) -> tuple[TensorMap, float]:
    """(the update scaled to L2 norm at most `bound`, its norm before). An update within the
    bound comes back unscaled (as new tensors); counts come back as they are."""
    bound = _positive("bound", bound)
    norm = l2_norm(update)
    factor = min(1.0, bound / norm) if norm > 0 else 1.0
    clipped: TensorMap = {}
    for node, keys in update.items():
        clipped[node] = {
            key: (tensor * factor if is_coordinate(tensor) else tensor)
            for key, tensor in keys.items()
        }
    return clipped, norm


# --- noise -----------------------------------------------------------------------------------


def noise_std(bound: float, multiplier: float, clients_sampled: int) -> float:
    """The standard deviation of the noise on the mean of `clients_sampled` clipped updates:
    z C / m. The mean's sensitivity is C / m (the fixed denominator), so z is the noise in
    units of the sensitivity, which is what the accountant takes."""
    bound = _positive("bound", bound)
    multiplier = _non_negative("noise multiplier", multiplier)
    clients_sampled = _count("clients sampled", clients_sampled)
    return multiplier * bound / clients_sampled


def share_std(bound: float, multiplier: float, clients_sampled: int) -> float:
    """One client's share of the noise in distributed DP: z C / sqrt(m). The m clients' shares
    are independent, so their sum has the variance m (z C)^2 / m = (z C)^2 of central DP's
    noise on the sum, and the averager's mean the central z C / m."""
    bound = _positive("bound", bound)
    multiplier = _non_negative("noise multiplier", multiplier)
    clients_sampled = _count("clients sampled", clients_sampled)
    return multiplier * bound / math.sqrt(clients_sampled)


def generator(seed: int | None, *parts: object) -> torch.Generator:
    """A CPU generator seeded by SHA-256 of (seed, parts): the same bits for the same (seed,
    parts) in every process; another round, client or purpose, another stream. `seed=None`:
    a seed from the operating system's entropy, different every call."""
    if seed is None:
        return torch.Generator().manual_seed(secrets.randbits(63))
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise PrivacyError(f"seed must be an integer or None, not {seed!r}")
    text = "/".join(["soma/privacy", str(int(seed)), *map(str, parts)])
    digest = hashlib.sha256(text.encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


def gaussian(like: Tensors, std: float, generator: torch.Generator) -> TensorMap:
    """N(0, std^2) for every float of `like` (in sorted node and key order, so the draw does not
    depend on the order a map was built in), in float32 for half precision and in the tensor's
    own dtype otherwise; counts get no noise and are absent from the result."""
    std = _non_negative("noise std", std)
    coordinates = sorted(_coordinates(like), key=lambda c: (c[0], c[1]))
    noise: TensorMap = {}
    for node, key, tensor in coordinates:
        dtype = working_dtype(tensor.dtype)
        draw = torch.randn(tensor.shape, generator=generator, dtype=dtype)
        noise.setdefault(node, {})[key] = draw * std
    return noise


# --- adaptive clipping (Andrew et al. 2021) ----------------------------------------------------


def update_multiplier(multiplier: float, count_std: float) -> float:
    """The noise multiplier the update itself needs, z_D = (z^-2 - (2 sigma_b)^-2)^(-1/2), so
    that the round (the update with z_D, the noisy count of unclipped updates with
    sigma_b) is accounted as one Gaussian mechanism with multiplier z (their Theorem 1; the
    count's sensitivity is 1/2, each client adding its indicator minus 1/2). Needs
    2 sigma_b > z: a count that noisy leaves room in the budget for the update's noise."""
    multiplier = _non_negative("noise multiplier", multiplier)
    count_std = _non_negative("count noise", count_std)
    if multiplier == 0:
        return 0.0
    if 2 * count_std <= multiplier:
        raise PrivacyError(
            f"the count noise {count_std:g} must be more than half the noise multiplier "
            f"{multiplier:g}, or the count alone would spend the whole budget"
        )
    return (multiplier**-2 - (2 * count_std) ** -2) ** -0.5


def next_clip(clip: float, unclipped: float, quantile: float, lr: float) -> float:
    """The geometric update of the clip towards the `quantile` of the update norms:
    C exp(-lr (unclipped - quantile)), `unclipped` being the (noisy) fraction of updates that
    were within C. More within C than the quantile says: C shrinks; fewer: it grows."""
    return _positive("clip", clip) * math.exp(-lr * (unclipped - quantile))


# --- the accountant --------------------------------------------------------------------------


def _dp_accounting() -> Any:
    try:
        import dp_accounting
    except ImportError as error:
        raise PrivacyError(f"the privacy accountant needs dp-accounting: {INSTALL}") from error
    _quiet(logging.getLogger("absl"))
    return dp_accounting


class _FractionalOrders(logging.Filter):
    """dp_accounting's RDP logs a warning for each fractional order below 2 whose series does
    not converge at a small sampling rate (q = 0.1, z near 1), and leaves that order out: the
    epsilon is then a minimum over fewer orders, so still an upper bound. One bisection
    would log hundreds of them; they say nothing about the answer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("_compute_log_a_frac failed to converge")


def _quiet(logger: logging.Logger) -> None:
    if not any(isinstance(f, _FractionalOrders) for f in logger.filters):
        logger.addFilter(_FractionalOrders())


def epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    rounds: int,
    delta: float,
    *,
    accountant: str = "rdp",
) -> float:
    """The epsilon spent at `delta` by `rounds` rounds, each a Gaussian mechanism with
    `noise_multiplier` on a Poisson sample of clients at `sampling_rate` (expected clients per
    round / clients). 0 for no round, infinite without noise."""
    return epsilon_of([(noise_multiplier, sampling_rate, rounds)], delta, accountant=accountant)


def epsilon_of(
    history: Sequence[Sequence[float]], delta: float, *, accountant: str = "rdp"
) -> float:
    """The epsilon spent at `delta` by a history of stretches (noise multiplier, sampling
    rate, rounds), composed: a run whose noise or participation changed is accounted as it
    ran, not as if it had run its last configuration all along."""
    stretches = tuple(_stretch(s) for s in history)
    delta = float(delta)
    if not 0 < delta < 1:
        raise PrivacyError(f"delta must be in (0, 1), not {delta!r}")
    if accountant not in ACCOUNTANTS:
        known = ", ".join(ACCOUNTANTS)
        raise PrivacyError(f"accountant must be one of {known}, not {accountant!r}")
    return _epsilon(stretches, delta, accountant)


@functools.lru_cache(maxsize=1024)
def _epsilon(stretches: tuple[Stretch, ...], delta: float, accountant: str) -> float:
    stretches = tuple(s for s in stretches if s[2] > 0)
    if not stretches:
        return 0.0
    if any(z == 0 for z, _, _ in stretches):
        return math.inf
    dp = _dp_accounting()
    events = [
        dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(z)), rounds)
        for z, q, rounds in stretches
    ]
    if accountant == "rdp":
        from dp_accounting import rdp

        ledger = rdp.RdpAccountant()
    else:
        from dp_accounting import pld

        ledger = pld.PLDAccountant()
    ledger.compose(dp.ComposedDpEvent(events))
    return float(ledger.get_epsilon(delta))


def noise_for_epsilon(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    rounds: int,
    *,
    accountant: str = "rdp",
    tolerance: float = 1e-4,
) -> float:
    """The smallest noise multiplier (to `tolerance`, relative) whose `rounds` rounds at
    `sampling_rate` spend at most `target_epsilon` at `delta`. Epsilon falls as the noise
    grows, so a bisection finds it; the answer is on the safe side (its epsilon <= target)."""
    target = _positive("target epsilon", target_epsilon)
    _count("rounds", rounds)

    def spent(z: float) -> float:
        return epsilon(z, sampling_rate, rounds, delta, accountant=accountant)

    low, high = 0.0, 1.0
    while spent(high) > target:
        low, high = high, high * 2
        if high > 1e6:
            raise PrivacyError(f"no noise multiplier up to 1e6 reaches epsilon {target:g}")
    while high - low > tolerance * high:
        middle = (low + high) / 2
        if spent(middle) > target:
            low = middle
        else:
            high = middle
    return high


def spent(state: object) -> dict[str, Any] | None:
    """What a strategy's state says was spent so far, `{"epsilon", "delta", "round"}` (and
    `"budget"` when the run has one), or None for a state that keeps no such account (another
    strategy's, or none). For `soma status` and the workflow's summary."""
    if not isinstance(state, Mapping):
        return None
    try:
        found = {
            "epsilon": float(state["epsilon"]),
            "delta": float(state["delta"]),
            "round": int(state["round"]),
        }
    except (KeyError, TypeError, ValueError):
        return None
    budget = state.get("budget")
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        found["budget"] = float(budget)
    return found


# --- arguments -------------------------------------------------------------------------------


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise PrivacyError(f"{name} must be a number, not {value!r}")
    return float(value)


def _positive(name: str, value: object) -> float:
    number = _real(name, value)
    if not (math.isfinite(number) and number > 0):
        raise PrivacyError(f"{name} must be a finite number > 0, not {value!r}")
    return number


def _non_negative(name: str, value: object) -> float:
    number = _real(name, value)
    if not (math.isfinite(number) and number >= 0):
        raise PrivacyError(f"{name} must be a finite number >= 0, not {value!r}")
    return number


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise PrivacyError(f"{name} must be an integer >= 1, not {value!r}")
    return int(value)


def _stretch(stretch: Sequence[float]) -> Stretch:
    try:
        z, q, rounds = stretch
    except (TypeError, ValueError):
        raise PrivacyError(
            f"a stretch of history is (noise multiplier, sampling rate, rounds), not {stretch!r}"
        ) from None
    z = _non_negative("noise multiplier", z)
    q = _real("sampling rate", q)
    if not 0 < q <= 1:
        raise PrivacyError(f"sampling rate must be in (0, 1], not {q!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
        raise PrivacyError(f"rounds must be an integer >= 0, not {rounds!r}")
    return z, q, int(rounds)
