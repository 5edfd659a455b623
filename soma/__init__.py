"""soma: federated learning on Slurm, with a shared folder and no coordinator."""

from soma.aggregate import fedavg
from soma.errors import (
    AggregationError,
    ElsewhereError,
    ExportError,
    LoadError,
    SomaError,
)
from soma.nodes import Elsewhere, Export, elsewhere, export, load
from soma.training import TrainingRun

__all__ = [
    "AggregationError",
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
