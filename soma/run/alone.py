"""Until soma.workflow's baselines import it from there: soma.training.trained_alone."""

from soma.training import trained_alone  # noqa: F401
