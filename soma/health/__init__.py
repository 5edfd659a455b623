"""A store's health over months of shared use: verify it, repair it, collect its garbage.

What each does and guarantees, and why gc cannot race a writer, is
docs/explanation/health.md ("A store's health: verify, repair, gc").
"""

from __future__ import annotations

# Every name importable from soma.health before it was split into modules still is: those of
# `__all__`, and (as `x as x`, an explicit re-export) the others, from where they live. The
# private helpers are not: patch or import them in their module (e.g. soma.health.collecting).
from soma.errors import SomaError as SomaError
from soma.health import advice as advice
from soma.health import reach as reach
from soma.health import rebuild as rebuild
from soma.health.advice import Advisor as Advisor
from soma.health.advice import average_text as average_text
from soma.health.collecting import DEAD_WRITER_AGE as DEAD_WRITER_AGE
from soma.health.collecting import GRACE, MIN_AGE, GcReport, gc
from soma.health.common import HealthError
from soma.health.reach import Graph as Graph
from soma.health.reach import files as files
from soma.health.reach import is_digest as is_digest
from soma.health.reach import list_blobs as list_blobs
from soma.health.reach import resolve_names as resolve_names
from soma.health.reach import symlinks as symlinks
from soma.health.reach import walk as walk
from soma.health.rebuild import finished_node_holder as finished_node_holder
from soma.health.rebuild import name_value as name_value
from soma.health.rebuild import rebuild_record as rebuild_record
from soma.health.rebuild import recompute_average
from soma.health.repairing import RepairReport, repair
from soma.health.verifying import Problem, VerifyReport, verify
from soma.round import holders as holders
from soma.round import layout as layout
from soma.round.layout import run_of as run_of
from soma.store import REFRESH_AFTER as REFRESH_AFTER
from soma.store import Store as Store
from soma.store import hash_stream as hash_stream
from soma.store import mark_corrupt as mark_corrupt
from soma.store.errors import BadBlob as BadBlob
from soma.store.errors import StoreError as StoreError
from soma.store.errors import SymlinkInStore as SymlinkInStore
from soma.store.errors import UnknownDigest as UnknownDigest

__all__ = [
    "GRACE",
    "MIN_AGE",
    "GcReport",
    "HealthError",
    "Problem",
    "RepairReport",
    "VerifyReport",
    "gc",
    "recompute_average",
    "repair",
    "verify",
]
