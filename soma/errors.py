"""The refusals soma makes. Each names the thing it refuses: the node, the key, the client."""


class SomaError(ValueError):
    """Anything soma refuses to do, always before it has done any of it."""


class ExportError(SomaError):
    """A training run cannot be exported as asked."""


class LoadError(SomaError):
    """A state does not fit the training run it is being loaded into."""


class ElsewhereError(ExportError, LoadError):
    """A node is trained where it runs, on another machine; what is here never learnt anything."""


class AggregationError(SomaError):
    """Exports cannot be averaged together (different networks, bad sizes, nothing at all)."""
