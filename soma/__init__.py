"""soma: federated learning on Slurm, with a shared folder and no coordinator."""

from soma.aggregate import fedavg
from soma.codecs import register_codec
from soma.errors import (
    AggregationError,
    ElsewhereError,
    ExportError,
    LoadError,
    SomaError,
)
from soma.nodes import Elsewhere, Export, elsewhere, export, load
from soma.round import (
    AveragerDied,
    Meeting,
    RoundError,
    RoundIncomplete,
    average_round,
    gather,
)
from soma.store import Store
from soma.store_errors import StoreError
from soma.strategies import StrategyError, load_strategy
from soma.training import TrainingRun

__all__ = [
    "AggregationError",
    "AveragerDied",
    "Meeting",
    "RoundError",
    "RoundIncomplete",
    "Store",
    "StoreError",
    "StrategyError",
    "load_strategy",
    "average_round",
    "gather",
    "register_codec",
    "Elsewhere",
    "ElsewhereError",
    "Export",
    "ExportError",
    "LoadError",
    "SomaError",
    "TrainingRun",
    "elsewhere",
    "export",
    "fedavg",
    "load",
]
