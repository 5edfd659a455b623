"""The refusals soma makes. Each names the thing it refuses: the node, the key, the client.

`SomaError` is the one root: catch it for anything soma refuses (the store's `StoreError`
and the partitions' `PartitionError` included), and nothing else. It is a plain `Exception`,
not a `ValueError`, because not every refusal is a bad value: a corrupt blob is the disk's
doing. Each class also subclasses the builtin a caller would naturally catch, the same one
as before there was a single root: `ValueError` for every refusal below and for most of the
store's, `LookupError` for something absent, `TypeError` for a value of a type the store
cannot keep (see soma.store.errors), so code that catches the builtin keeps working.
"""


class SomaError(Exception):
    """Anything soma refuses to do, always before it has done any of it."""


class ExportError(SomaError, ValueError):
    """A training run cannot be exported as asked."""


class LoadError(SomaError, ValueError):
    """A state does not fit the training run it is being loaded into."""


class ElsewhereError(ExportError, LoadError):
    """A node is trained where it runs, on another machine; what is here never learnt anything."""


class AggregationError(SomaError, ValueError):
    """Exports cannot be averaged together (different networks, bad sizes, nothing at all)."""


class TaskError(SomaError, ValueError):
    """A task cannot be found, refuses its options, or does not answer the protocol (see
    soma.tasks, which exports it too)."""
