"""Per-round metrics as TensorBoard event files, for watching runs while they go (the
optional extra `soma[tracking]`: pip install 'soma[tracking]', which is `tensorboard`).

TensorBoard rather than MLflow: an event file is written by one process and never shared, and
TensorBoard reads every event file under a folder as one run's, merged by step; so the many
jobs of a run (Snakemake's, Slurm's, `soma client`'s) each append their own file to a folder
on the shared filesystem with no server, no lock and no database, as the store itself does.
MLflow wants a tracking server, or a file store whose per-metric files several writers would
append to at once.

Each job writes what it computed, with the round as the step: the workflow's `evaluate` job
its round's central test metrics (`test/<metric>`), federated evaluation (`validation/<metric>/
mean`, `.../min`, `p10`, `median`, `p90`, `max`), the clients' training metrics aggregated the
same way (`train/<metric>/...`) and the epsilon spent (`privacy/epsilon`); under `soma client`
and `soma simulate` (`--tracking DIR`) the process that settles a round's federated evaluation.
Nothing is written unless tracking is asked for (config `tracking: true`, `--tracking DIR`);
asked for without the extra, the run is refused before it starts, naming the option.
"""

from __future__ import annotations

import importlib.util
import numbers
from collections.abc import Mapping
from typing import Any

from soma.errors import SomaError


class TrackingError(SomaError, ValueError):
    """Tracking was asked for and cannot be done (the extra is not installed)."""


def check_available() -> None:
    """Refuse tracking without its extra, before any job runs (nothing imported)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise TrackingError(
            "tracking writes TensorBoard event files and needs the `tracking` extra: "
            "pip install 'soma[tracking]' (or tensorboard)"
        )


def scalars(
    central: Mapping[str, Any] | None = None,
    federated: Mapping[str, Any] | None = None,
    privacy: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """The tags and values of one round (see the module); only numbers."""
    out: dict[str, float] = {}

    def put(tag: str, value: Any) -> None:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            out[tag] = float(value)

    for name, value in (central or {}).items():
        put(f"test/{name}", value)
    for part, prefix in (("evaluation", "validation"), ("training", "train")):
        for name, spread in ((federated or {}).get(part) or {}).items():
            for stat in ("mean", "min", "p10", "median", "p90", "max"):
                put(f"{prefix}/{name}/{stat}", spread.get(stat))
    put("privacy/epsilon", (privacy or {}).get("epsilon"))
    return out


def track_round(folder: str, round: int, **given: Any) -> dict[str, float]:
    """Append round `round`'s scalars (see `scalars`) to a new event file of this process in
    `folder`; what was written."""
    from torch.utils.tensorboard import SummaryWriter

    values = scalars(**given)
    if not values:
        return values
    writer = SummaryWriter(log_dir=folder)
    try:
        for tag, value in sorted(values.items()):
            writer.add_scalar(tag, value, global_step=round)
    finally:
        writer.close()
    return values


def read_scalars(folder: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in `folder`, by tag: (step, value) in step order, read
    by TensorBoard's own reader (what `tensorboard --logdir` shows)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder, size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: sorted((e.step, e.value) for e in events.Scalars(tag))
        for tag in events.Tags()["scalars"]
    }
