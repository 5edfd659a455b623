"""soma: federated learning on Slurm, with a shared folder and no coordinator.

The names below are imported when first used (PEP 562), so that `import soma.config.participation`
(the Snakefile, at parse time) or `soma status` does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from soma.errors import AggregationError, ElsewhereError, ExportError, LoadError, SomaError

_WHERE = {
    "fedavg": "soma.aggregate",
    "register_codec": "soma.store.codecs",
    "Elsewhere": "soma.nodes",
    "Export": "soma.nodes",
    "elsewhere": "soma.nodes",
    "export": "soma.nodes",
    "load": "soma.nodes",
    "AveragerDied": "soma.round",
    "Meeting": "soma.round",
    "RoundError": "soma.round",
    "RoundIncomplete": "soma.round",
    "average_round": "soma.round",
    "gather": "soma.run.gather",
    "Store": "soma.store",
    "StoreError": "soma.store.errors",
    "StrategyError": "soma.strategies",
    "load_strategy": "soma.strategies",
    "TrainingRun": "soma.training",
    "adjust_on_cpu": "soma.training",
    "keyed_parameters": "soma.training",
    "simulate": "soma.run.simulate",
}

__all__ = [
    "AggregationError",
    "ElsewhereError",
    "ExportError",
    "LoadError",
    "SomaError",
    "fedavg",
    "register_codec",
    "Elsewhere",
    "Export",
    "elsewhere",
    "export",
    "load",
    "AveragerDied",
    "Meeting",
    "RoundError",
    "RoundIncomplete",
    "average_round",
    "gather",
    "Store",
    "StoreError",
    "StrategyError",
    "load_strategy",
    "TrainingRun",
    "adjust_on_cpu",
    "keyed_parameters",
    "simulate",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'soma' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from soma.aggregate import fedavg
    from soma.nodes import Elsewhere, Export, elsewhere, export, load
    from soma.round import (
        AveragerDied,
        Meeting,
        RoundError,
        RoundIncomplete,
        average_round,
    )
    from soma.run.gather import gather
    from soma.run.simulate import simulate
    from soma.store import Store
    from soma.store.codecs import register_codec
    from soma.store.errors import StoreError
    from soma.strategies import StrategyError, load_strategy
    from soma.training import TrainingRun, adjust_on_cpu, keyed_parameters
