"""DP-FedAvg (McMahan et al. 2018): FedAvg with client-level differential privacy.

Each round, a client's update (its weights minus the round's start) is clipped to L2 norm
`clip` (all of its floats together, `soma.privacy.clip`), and Gaussian noise of standard
deviation z C on the sum (z = `noise_multiplier`) makes the round a Gaussian mechanism whose
privacy `soma.privacy`'s accountant adds up over the rounds. Integer and bool tensors
(BatchNorm's counts) are never clipped nor noised, so no client's value of them is
published (a count of steps says how much data a client holds): the round's start's value
stands, in both modes (a distributed client sends the start's).

The estimator is McMahan et al.'s fixed-denominator one: the next weights are
`start + (sum of clipped updates + noise) / m`, m being the number of clients expected per
round (`clients_per_round`, every client of the run by default), not the number that came,
and every client weighing the same. A size-weighted mean, or a mean over whoever came, would
let one client move the result by more than C / m, and the noise would no longer cover it.
A round where fewer than m came (a quorum) moves less; its noise is the same. Left null
under a workflow `participation`, m is every client: the noise and the accounting are those
of everyone every round (private, with no amplification by sampling), and each step is
shrunk by the fraction that came.

Two modes:

- `central` (default): the clients send their weights as they trained them and the averager
  clips, sums and adds N(0, (z C / m)^2) to the mean. It protects the published weights
  (and the model file) from whoever receives them; the averager and whoever reads the store
  see every client's update in the clear.
- `distributed`: each client clips its own update and adds its share of the noise,
  N(0, (z C)^2 / m), before its weights leave it (`release`, see soma.strategies); the averager only
  averages. The m shares add up to central DP's noise, and the store only ever holds noisy
  updates; but one client's update on its own carries 1/m of the noise's variance (a multiplier
  of z / sqrt(m)), and that is what whoever reads the store sees of it, unless secure
  aggregation puts only the sum there (then z). The averager cannot check that a client clipped
  or added its noise (noise makes any norm plausible): a client that does not is not protected,
  and one that sends anything moves the mean as in FedAvg. Every one of the m must come (a round
  with fewer is refused: their shares would add up to less noise than the accountant counts), so
  run it with the quorum at its default.
  Colluding clients: k of the m who pool their shares take them off the sum, so the published
  weights hold against them with multiplier z sqrt((m - k) / m), not z (so does a secure sum for
  the store reader); one honest client's own share, z / sqrt(m), holds against any k <= m - 1
  (docs/how-to/privacy.md). Each release is claimed once per client and round
  (soma.round.client): a rerun or a racing attempt never puts a second noisy release of one
  update in the store, and a restarted client goes on from its release, drawing no new noise.

Adaptive clipping (Andrew et al. 2021, `adaptive`): the clip follows the `quantile` of the
update norms, C <- C exp(-lr (b - quantile)), b being the fraction of updates that were within
C, estimated from the clients' indicators (each minus 1/2, so one client moves the count by
1/2) plus N(0, count_noise^2) (`count_noise` defaults to m / 20, as in the paper). The round
is then accounted with `noise_multiplier` z as a whole: the update's own noise is raised to
z_D = (z^-2 - (2 count_noise)^-2)^(-1/2) (their Theorem 1), which needs 2 count_noise > z.
In distributed mode each client sends its indicator (minus 1/2, plus its share of the count
noise) beside its weights, and the clip reaches the clients through the strategy's state.

The noise comes from `soma.privacy.private_noise`: AES-256 in counter mode keyed by 32 bytes from
the operating system, a fresh key for each draw (each round, each distributed client), never
written anywhere, so nobody can draw it again and take it off (a rerun round is another averaging).
`noise: reproducible_not_private` keys it by the SHA-256 of (`seed`, the round, the client's
training seed) instead, so that a benchmark repeats bit for bit; whoever knows the seed can then
strip the noise, so the epsilon reported is infinite. `seed` is refused without it.

Whom the epsilon holds against: two readers, two figures, both knowing who took part in each round
(the sample is drawn by hash from the run's seed and written in each round's record), so sampling
amplifies nothing: each client's epsilon is its own rounds' Gaussian mechanisms composed
(`soma.privacy.epsilon_public`, add-or-remove-one), and the state reports the worst-placed
client's. Against whoever reads only the published weights (`weights_reader`) a round is the noisy
sum's, multiplier z. Against whoever reads the store (`store_reader`) it is what the store holds of
the client: in central mode its update in the clear (infinite), in distributed mode its release
(z / sqrt(m)) or, when the round tells the strategy it steps from a secure sum
(`for_secure_aggregation`), the sum (z). The budget stops on the store reader's figure in
distributed mode and on the published weights' in central mode. A round stepped from the mean (a
tree, a secure sum) does not say who came and is charged to every client.

The state, a JSON value the store keeps with each round's average: `{"round", "epsilon", "delta",
"budget", "clip", "history", "exposure", "against", "epsilons", "published"}`: rounds averaged so
far, the worst-placed client's epsilon at `delta` against `against` (the figure the budget stops
on), the clip the next round uses, the history of (noise multiplier, sampling rate m / clients,
rounds), each client's exposure against `against` (the sum of the multipliers^-2 of its rounds,
`{"everyone", "clients"}`), each figure by whom it holds against (`epsilons`), and each client's
exposure against a reader of the published weights (`published`); `soma.privacy.spent` reads it. A
state kept before `against` is read too (its exposure was the published weights').

`budget`: the epsilon at which the run stops. A round that would take the epsilon past it is
refused with a StrategyError naming the budget and the epsilon it would reach (the
worst-placed client's, taking part once more), before anything is claimed (`check_state`,
which the round calls beside `check`: `check` does not see the state, which holds how many
rounds were spent) and again in `aggregate` before any arithmetic. The clients of that round
have trained by then (nothing of theirs is published), and in the workflow the average job
fails with the refusal, which stops the run.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from soma import privacy
from soma.lazy import OnUse
from soma.strategies import Arrival, Parameters, State, Strategy, StrategyError, Update
from soma.strategies._dp_state import (
    NAME,
    NO_EXPOSURE,
    NOT_PRIVATE,
    PRIVATE,
    Before,
    Exposure,
    Options,
    _adaptive,
    _number,
    read_state,
)

if TYPE_CHECKING:
    import torch

    from soma import arithmetic
    from soma.nodes import Export
    from soma.strategies import _fedopt
else:  # torch only where a round is averaged or released: soma status reads the state's JSON
    torch = OnUse("torch", globals())
    arithmetic = OnUse("soma.arithmetic", globals())
    _fedopt = OnUse("soma.strategies._fedopt", globals())

MODES = ("central", "distributed")
NOISES = (PRIVATE, NOT_PRIVATE)
EXTRA = ("dp", "unclipped")  # the node and key of a distributed client's noisy indicator


# --- the strategy, central ---------------------------------------------------------------------


class DPFedAvg(Strategy):
    """Central DP-FedAvg: the averager clips, sums, adds the noise and keeps the account."""

    # The round refuses, before anything is claimed, to run us without a start to step from.
    needs_previous: ClassVar[bool] = True
    # Whom the epsilon the budget stops on holds against: the clients' updates are in the
    # store in the clear, so only a reader of the published weights is held off.
    against: ClassVar[str] = privacy.WEIGHTS_READER

    def __init__(self, options: Options) -> None:
        self.options = options

    @property  # type: ignore[override]
    def recomputable(self) -> bool:
        """Central noise keyed from the operating system can never be drawn again, so the
        average cannot be recomputed (soma.round.verify checks its record and inputs)."""
        return self.options.noise != PRIVATE

    # -- what can be refused before anything is claimed ------------------------------------

    def expected(self, clients: int) -> int:
        """m: how many clients a round expects (the fixed denominator)."""
        m = self.options.clients_per_round
        if m is None:
            return clients
        if m > clients:
            raise StrategyError(
                f"{NAME} option clients_per_round={m} is more than the run's {clients} clients"
            )
        return m

    def update_multiplier(self, expected: int) -> float:
        """The noise multiplier of the update itself (raised under adaptive clipping)."""
        z, adaptive = self.options.noise_multiplier, self.options.adaptive
        if adaptive is None:
            return z
        count = adaptive.count_std(expected)
        try:
            return privacy.update_multiplier(z, count)
        except privacy.PrivacyError as error:
            default = "" if adaptive.count_noise is not None else " (clients per round / 20)"
            raise StrategyError(
                f"{NAME} option adaptive.count_noise={count:g}{default} must be more than "
                f"noise_multiplier / 2 = {z / 2:g}: a count so little noisy would spend the "
                "whole budget; raise count_noise"
            ) from error

    def check(self, arrivals: Sequence[Arrival], *, clients: int) -> None:
        m = self.expected(clients)
        self.update_multiplier(m)
        if len(arrivals) > m:
            raise StrategyError(
                f"{NAME}: {len(arrivals)} clients came, more than clients_per_round={m}: "
                "the noise is calibrated to m clients (set clients_per_round to the "
                "participation's count)"
            )

    def check_state(self, state: State | None, *, clients: int) -> None:
        """Refuse the round if it would take the epsilon past the budget."""
        self.before(state, clients=clients)

    def privacy_spent(self, state: State | None) -> dict[str, Any] | None:
        """The epsilon at delta the rounds so far spent, as the state keeps it."""
        return privacy.spent(state)

    def before(self, state: State | None, *, clients: int) -> Before:
        """The round's start, read from the state and checked against the budget."""
        m = self.expected(clients)
        if state is None:
            start = Before(0, self.options.clip, [], m, m / clients, NO_EXPOSURE, NO_EXPOSURE)
        else:
            kept = read_state(state)
            if kept.against is None:  # kept before the readers were apart: the sum's noise
                exposure = self.charged_before(kept.published)
            elif kept.against != self.against:
                raise StrategyError(
                    f"{NAME} state accounts against {kept.against}, mode {self.options.mode} "
                    f"against {self.against}: the mode changed during the run"
                )
            else:
                exposure = kept.exposure
            start = Before(
                kept.round, kept.clip, kept.history, m, m / clients, exposure, kept.published
            )
        done, exposure = start.round, start.exposure
        budget = self.options.budget
        if budget is not None:
            # whoever is worst placed so far may take part in the next round
            after = self.epsilon(exposure.after(self.reader_cost(m), None))
            if after > budget:
                so_far = f"{done} round{'' if done == 1 else 's'} so far spent"
                raise StrategyError(
                    f"{NAME} option budget={budget:g}: one more round would spend epsilon "
                    f"{after:.4g} at delta {self.options.delta:g} ({so_far} "
                    f"{self.epsilon(exposure):.4g}); the run stops here"
                )
        return start

    def round_cost(self) -> float:
        """What one round costs a client that takes part in it against whoever reads only the
        published weights, which hold the noisy sum (soma.privacy.exposure)."""
        return privacy.exposure(self.options.noise_multiplier)

    def reader_cost(self, expected: int) -> float:
        """What one round costs a client that takes part in it against `against`, the
        reader the budget stops on (central mode: the published weights' reader)."""
        return self.round_cost()

    def charged_before(self, published: Exposure) -> Exposure:
        """The exposure against `against` of a state kept before the two readers were kept
        apart (it holds the published weights' only)."""
        return published

    def epsilon(self, exposure: Exposure) -> float:
        """The worst-placed client's epsilon against whoever reads the store (the sample is
        public); infinite when the noise is reproducible, hence strippable."""
        if self.options.noise == NOT_PRIVATE and exposure.worst() > 0:
            return math.inf
        try:
            return privacy.epsilon_public(exposure.worst(), self.options.delta)
        except privacy.PrivacyError as error:
            raise StrategyError(f"{NAME}: {error}") from error

    def noise_source(self, *parts: object) -> privacy.NoiseSource:
        """The round's noise: keyed from the operating system, or (reproducible_not_private)
        from the seed and `parts`."""
        if self.options.noise == PRIVATE:
            return privacy.private_noise()
        seed = 0 if self.options.seed is None else self.options.seed
        return privacy.reproducible_noise_not_private(seed, *parts)

    # -- the round ----------------------------------------------------------------------------

    def begin(self, previous: Export | None, state: State | None, *, clients: int) -> Before:
        """Where a round starts (its weights, the account so far), or a refusal."""
        if previous is None:
            raise StrategyError(
                f"{NAME} steps from the weights the round started from, and there are none"
            )
        return self.before(state, clients=clients)

    def aggregate(
        self,
        previous: Export | None,
        updates: Iterable[Update],
        state: State | None,
        *,
        clients: int,
    ) -> tuple[Export, State]:
        start = self.begin(previous, state, clients=clients)
        m = start.expected
        total, took_part, unclipped = self.fold(previous, updates, start.clip)
        if len(took_part) > m:
            raise StrategyError(
                f"{NAME}: {len(took_part)} clients came, more than clients_per_round={m}"
            )
        noise_gen = self.noise_source("central", start.round + 1)
        std = privacy.noise_std(start.clip, self.update_multiplier(m), m)
        noise = privacy.gaussian(previous, std, noise_gen)
        weights = step(previous, total, noise, counts_of(previous), m)
        clip = start.clip
        if self.options.adaptive is not None:
            count_noise = self.options.adaptive.count_std(m)
            noisy = unclipped + count_noise * draw_one(noise_gen)
            clip = self.next_clip(start.clip, noisy, m)
        return weights, self.state_after(start, clip, took_part)

    def fold(
        self, previous: Export, updates: Iterable[Update], clip: float
    ) -> tuple[dict[str, dict[str, torch.Tensor]], list[int], float]:
        """(the sum of the clipped updates, the clients that came, the sum of their unclipped
        indicators minus 1/2): one update in memory at a time. Their counts are not read: no
        noise covers them (the start's stand, `counts_of`)."""
        total = zeros_like_floats(previous)
        took_part: list[int] = []
        unclipped = 0.0
        with torch.no_grad():
            for update in updates:
                delta, _ = difference(previous, update.weights, update.client)
                clipped, norm = privacy.clip(delta, clip)
                add_into(total, clipped)
                unclipped += (1.0 if norm <= clip else 0.0) - 0.5
                took_part.append(update.client)
        if not took_part:
            raise StrategyError(f"{NAME}: no client's update to average")
        return total, took_part, unclipped

    def next_clip(self, clip: float, noisy_unclipped: float, expected: int) -> float:
        """The adaptive clip after this round, from the noisy sum of indicators minus 1/2."""
        adaptive = self.options.adaptive
        assert adaptive is not None
        fraction = noisy_unclipped / expected + 0.5
        return privacy.next_clip(clip, fraction, adaptive.quantile, adaptive.lr)

    def state_after(self, start: Before, clip: float, took_part: Iterable[int] | None) -> State:
        """The state after this round, charged to the clients that took part (None: to every
        client, when the round does not say who)."""
        history = start.history_after(self.options.noise_multiplier)
        took_part = None if took_part is None else list(took_part)
        exposure = start.exposure.after(self.reader_cost(start.expected), took_part)
        published = start.published.after(self.round_cost(), took_part)
        epsilon = float(self.epsilon(exposure))
        epsilons = {
            privacy.STORE_READER: epsilon if self.against == privacy.STORE_READER else math.inf,
            privacy.WEIGHTS_READER: float(self.epsilon(published)),
        }
        return {
            "round": start.round + 1,
            "epsilon": epsilon,
            "delta": float(self.options.delta),
            "budget": None if self.options.budget is None else float(self.options.budget),
            "clip": float(clip),
            "history": history,
            "exposure": exposure.value(),
            "against": self.against,
            "epsilons": epsilons,
            "published": published.value(),
        }


# --- the strategy, distributed -----------------------------------------------------------------


class DistributedDPFedAvg(DPFedAvg):
    """Distributed DP-FedAvg: each client clips and adds its share of the noise; the averager
    only averages, and keeps the account (it cannot check the clipping: see the module).

    The mode that composes with secure aggregation: the averager needs only the clients'
    mean, with every client weighing the same (`uniform`: sizes are not weights here), so it
    steps `from_mean` (soma.secagg.round, soma.round.tree). Adaptive clipping needs each client's
    indicator beside its weights, so it has no `from_mean`, and is refused there."""

    uniform = True  # every client weighs the same, whatever its size (the sensitivity bound)
    # Each client's release is noisy before it leaves: the store reader is held off too.
    against: ClassVar[str] = privacy.STORE_READER

    recomputable = True  # type: ignore[assignment]  # the noise is in the clients' releases
    # Each client's export is a release (noise drawn by the attempt): claimed once per client
    # and round, and a restarted client goes on from it (soma.round.client.released).
    releases: ClassVar[bool] = True

    def __init__(self, options: Options, *, secure: bool = False) -> None:
        super().__init__(options)
        self.secure = secure  # the round is a secure sum: the store holds no client's release
        if options.adaptive is not None:
            self.from_mean = None  # type: ignore[assignment]  # needs each client's indicator

    def for_secure_aggregation(self) -> DistributedDPFedAvg:
        """The strategy as it steps from a secure sum: only the sum of the m releases is in
        the store, so a reader of it sees the sum's noise (z), not one client's (z / sqrt(m))."""
        return DistributedDPFedAvg(self.options, secure=True)

    def reader_cost(self, expected: int) -> float:
        """What one round costs a client against whoever reads the store: its own release's
        z / sqrt(m), or under secure aggregation the sum's z."""
        z = self.options.noise_multiplier  # adaptive: the update's and the count's together
        return privacy.exposure(privacy.distributed_multiplier(z, expected, secure=self.secure))

    def charged_before(self, published: Exposure) -> Exposure:
        """A state kept before the readers were apart was charged at the sum's z: against the
        store reader each of its rounds costs m times that (whether a round stepped from the
        mean was a secure sum or a tree of clear releases, it does not say: the worse)."""
        m = self.options.clients_per_round
        assert m is not None  # make() refuses distributed mode without it
        return published.scaled(m)

    def from_mean(
        self, previous: Export | None, mean: Export, state: State | None, *, clients: int
    ) -> tuple[Export, State]:
        """The step from the uniform mean of the m clients' released weights: the mean (the
        noise is in it, from the clients' shares), and the account of the round."""
        start = self.begin(previous, state, clients=clients)
        delta, _ = difference(previous, mean, None)
        weights = step(previous, delta, {}, counts_of(previous), 1)
        return weights, self.state_after(start, start.clip, None)  # charged to every client

    def check(self, arrivals: Sequence[Arrival], *, clients: int) -> None:
        super().check(arrivals, clients=clients)
        m = self.expected(clients)
        if len(arrivals) < m:
            raise StrategyError(
                f"{NAME} mode distributed: {len(arrivals)} of the clients_per_round={m} clients "
                "came; each adds 1/m of the noise's variance, so the round's noise would be "
                "below what noise_multiplier promises (run it without a quorum, or in central "
                "mode)"
            )
        if self.options.adaptive is not None:
            for arrival in arrivals:
                if not arrival.extra:
                    raise StrategyError(
                        f"{NAME}: client {arrival.client} sent no clipped indicator beside its "
                        "weights (adaptive clipping, distributed mode)"
                    )

    def local(self, *, start: Export, state: State | None, mine: State | None) -> NoiseShare:
        kept = None if state is None else read_state(state)
        done, clip = (0, self.options.clip) if kept is None else (kept.round, kept.clip)
        m = self.options.clients_per_round
        assert m is not None  # make() refuses distributed mode without it
        adaptive = self.options.adaptive
        return NoiseShare(
            clip=clip,
            std=privacy.share_std(clip, self.update_multiplier(m), m),
            count_std=None if adaptive is None else adaptive.count_std(m) / math.sqrt(m),
            noise=self.noise_source,
            round=done + 1,
        )

    def aggregate(
        self,
        previous: Export | None,
        updates: Iterable[Update],
        state: State | None,
        *,
        clients: int,
    ) -> tuple[Export, State]:
        start = self.begin(previous, state, clients=clients)
        m = start.expected
        total = zeros_like_floats(previous)
        took_part: list[int] = []
        unclipped = 0.0
        with torch.no_grad():
            for update in updates:
                delta, _ = difference(previous, update.weights, update.client)
                add_into(total, delta)
                took_part.append(update.client)
                if self.options.adaptive is not None:
                    unclipped += indicator(update)
        if len(took_part) != m:
            raise StrategyError(
                f"{NAME} mode distributed: {len(took_part)} of the clients_per_round={m} "
                "clients came"
            )
        weights = step(previous, total, {}, counts_of(previous), m)
        clip = start.clip
        if self.options.adaptive is not None:
            clip = self.next_clip(start.clip, unclipped, m)
        return weights, self.state_after(start, clip, took_part)


class NoiseShare:
    """One client's side of distributed DP-FedAvg: clip its update, add its share of the noise
    (`release`), and send its noisy clipped indicator beside (`finish`, when adaptive)."""

    def __init__(
        self,
        *,
        clip: float,
        std: float,
        count_std: float | None,
        noise: Callable[..., privacy.NoiseSource],
        round: int,
    ) -> None:
        self.clip, self.std, self.count_std = clip, std, count_std
        self.noise, self.round = noise, round
        self.indicator: float | None = None
        self.released = False

    def adjust(self, parameters: Parameters, lr: float) -> None:
        """Nothing: the training itself is FedAvg's."""

    def release(self, trained: Export, start: Export, *, seed: int) -> Export:
        """The weights this client sends: start + clipped update + its share of the noise, and
        the start's counts (its own would leave it with no noise on them)."""
        with torch.no_grad():
            delta, _ = difference(start, trained, None)
            clipped, norm = privacy.clip(delta, self.clip)
            noise_gen = self.noise("distributed", self.round, seed)
            noise = privacy.gaussian(start, self.std, noise_gen)
            released = step(start, clipped, noise, counts_of(start), 1)
            if self.count_std is not None:
                within = (1.0 if norm <= self.clip else 0.0) - 0.5
                self.indicator = within + self.count_std * draw_one(noise_gen)
        self.released = True
        return released

    def finish(self, trained: Export) -> tuple[Export | None, State | None]:
        if not self.released:
            raise StrategyError(
                f"{NAME} mode distributed: finish() before release(): the client's weights "
                "would leave it unclipped and without noise (train with "
                "soma.strategies.train_locally)"
            )
        if self.indicator is None:
            return None, None
        node, key = EXTRA
        return {node: {key: torch.tensor([self.indicator], dtype=torch.float64)}}, None


# --- the arithmetic ----------------------------------------------------------------------------


def zeros_like_floats(like: Export) -> dict[str, dict[str, torch.Tensor]]:
    """A zero for every float of `like`, in its working dtype."""
    zeros: dict[str, dict[str, torch.Tensor]] = {}
    for node, keys in like.items():
        for key, tensor in keys.items():
            if tensor.dtype.is_complex:
                raise StrategyError(
                    f"{NAME}: node {node!r} key {key!r} is {tensor.dtype}; differential "
                    "privacy here clips and noises real floats only"
                )
            if privacy.is_coordinate(tensor):
                dtype = arithmetic.working_dtype(tensor.dtype)
                zeros.setdefault(node, {})[key] = torch.zeros(tensor.shape, dtype=dtype)
    return zeros


def difference(
    start: Export, weights: Export, client: int | None
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, dict[str, torch.Tensor]]]:
    """(weights - start for every float, in the working dtype; the counts of `weights`),
    refused by name when the two are not the same network."""
    who = "the trained weights" if client is None else f"client {client}"
    _fedopt.check_like(NAME, start, weights, who)
    delta: dict[str, dict[str, torch.Tensor]] = {}
    counts: dict[str, dict[str, torch.Tensor]] = {}
    for node, keys in start.items():
        for key, origin in keys.items():
            theirs = weights[node][key]
            if origin.dtype.is_complex:
                raise StrategyError(
                    f"{NAME}: node {node!r} key {key!r} is {origin.dtype}; differential "
                    "privacy here clips and noises real floats only"
                )
            if privacy.is_coordinate(origin):
                work = arithmetic.working_dtype(origin.dtype)
                delta.setdefault(node, {})[key] = theirs.to(work) - origin.to(work)
            else:
                counts.setdefault(node, {})[key] = theirs
    return delta, counts


def counts_of(start: Export) -> dict[str, dict[str, torch.Tensor]]:
    """The start's counts (integer and bool tensors): what a DP round keeps of them. A
    client's counts (BatchNorm's `num_batches_tracked`: its steps, so its size) would pass
    into the published weights with no noise on them; the start's say nothing new."""
    counts: dict[str, dict[str, torch.Tensor]] = {}
    for node, keys in start.items():
        for key, tensor in keys.items():
            if not tensor.dtype.is_complex and not privacy.is_coordinate(tensor):
                counts.setdefault(node, {})[key] = tensor.clone()
    return counts


def add_into(total: dict[str, dict[str, torch.Tensor]], update: privacy.Tensors) -> None:
    for node, keys in total.items():
        for key, tensor in keys.items():
            tensor.add_(update[node][key])


def step(
    start: Export,
    total: privacy.Tensors,
    noise: privacy.Tensors,
    counts: privacy.Tensors,
    expected: int,
) -> Export:
    """start + (total / expected) + noise for the floats, in each one's own dtype; the counts
    as given."""
    weights: Export = {}
    for node, keys in start.items():
        weights[node] = {}
        for key, origin in keys.items():
            if not privacy.is_coordinate(origin):
                weights[node][key] = counts[node][key]
                continue
            moved = origin.to(total[node][key].dtype) + total[node][key] / expected
            drawn = noise.get(node, {}).get(key)
            if drawn is not None:
                moved = moved + drawn
            weights[node][key] = moved.to(origin.dtype)
    return weights


def draw_one(noise_gen: privacy.NoiseSource) -> float:
    """One standard normal draw from the source (the count's noise, after the update's)."""
    return float(noise_gen.normal((1,))[0])


def indicator(update: Update) -> float:
    """A distributed client's noisy clipped indicator (minus 1/2), refused by name if absent."""
    node, key = EXTRA
    extra = update.extra or {}
    value = extra.get(node, {}).get(key)
    if value is None or value.numel() != 1 or not value.dtype.is_floating_point:
        raise StrategyError(
            f"{NAME}: client {update.client} sent no clipped indicator ({node}/{key}, one float) "
            "beside its weights (adaptive clipping, distributed mode)"
        )
    number = float(value.reshape(()))
    if not math.isfinite(number):
        raise StrategyError(f"{NAME}: client {update.client}'s clipped indicator is {number}")
    return number


def make(
    clip: float = 1.0,
    noise_multiplier: float = 1.0,
    mode: str = "central",
    clients_per_round: int | None = None,
    adaptive: Mapping[str, Any] | bool | None = None,
    seed: int | None = None,
    delta: float = 1e-5,
    budget: float | None = None,
    noise: str = PRIVATE,
) -> DPFedAvg:
    """DP-FedAvg's options (`strategy_options.dp_fedavg`, `--strategy-option KEY=VALUE`): `clip`
    (1.0: each update's L2 bound, > 0; the starting one when adaptive), `noise_multiplier` (1.0:
    z, >= 0; 0 only clips, and spends an infinite epsilon), `mode` (`central` or `distributed`),
    `clients_per_round` (m, null: every client; required in distributed mode), `adaptive` (null,
    true for the defaults, or a map of `quantile`, `lr`, `count_noise`), `seed` (null; with
    `noise: reproducible_not_private` only), `delta` (1e-5), `budget` (null, or the epsilon that
    stops the run), `noise` (`private` or `reproducible_not_private`). Needs `soma[privacy]`."""
    clip = _number("clip", clip, "> 0", lambda x: x > 0)
    noise_multiplier = _number("noise_multiplier", noise_multiplier, ">= 0", lambda x: x >= 0)
    if mode not in MODES:
        raise StrategyError(f"{NAME} option mode must be one of {', '.join(MODES)}, not {mode!r}")
    if clients_per_round is not None and (
        isinstance(clients_per_round, bool)
        or not isinstance(clients_per_round, numbers.Integral)
        or clients_per_round < 1
    ):
        raise StrategyError(
            f"{NAME} option clients_per_round must be null or an integer >= 1, "
            f"not {clients_per_round!r}"
        )
    if mode == "distributed" and clients_per_round is None:
        raise StrategyError(
            f"{NAME} option clients_per_round is needed in distributed mode: each client adds "
            "1/clients_per_round of the noise's variance (the participation's count, or the "
            "number of clients)"
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0
    ):
        raise StrategyError(f"{NAME} option seed must be null or an integer >= 0, not {seed!r}")
    if noise not in NOISES:
        raise StrategyError(
            f"{NAME} option noise must be one of {', '.join(NOISES)}, not {noise!r}"
        )
    if seed is not None and noise != NOT_PRIVATE:
        raise StrategyError(
            f"{NAME} option seed={seed} seeds the noise only under noise: {NOT_PRIVATE}: "
            "noise drawn from a seed in the config can be drawn again and taken off the "
            "weights (private noise is keyed from the operating system)"
        )
    delta = _number("delta", delta, "in (0, 1)", lambda d: 0 < d < 1)
    if budget is not None:
        budget = _number("budget", budget, "> 0", lambda b: b > 0)
    if importlib.util.find_spec("dp_accounting") is None:
        raise StrategyError(f"{NAME} accounts for privacy with dp-accounting: {privacy.INSTALL}")
    options = Options(
        clip=clip,
        noise_multiplier=noise_multiplier,
        mode=mode,
        clients_per_round=None if clients_per_round is None else int(clients_per_round),
        adaptive=_adaptive(adaptive),
        seed=None if seed is None else int(seed),
        delta=delta,
        budget=budget,
        noise=noise,
    )
    strategy = DistributedDPFedAvg(options) if mode == "distributed" else DPFedAvg(options)
    if clients_per_round is not None:
        strategy.update_multiplier(int(clients_per_round))  # adaptive's count noise, early
    return strategy
