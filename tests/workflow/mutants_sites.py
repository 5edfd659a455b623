"""Broken variants of sites (config `site`, `sites`; registered into tests/mutants.py's
MUTANTS). Applied in the snakemakes and their jobs too (tests/inherited/sitecustomize.py)."""

from __future__ import annotations

from mutants import _replace, mutant

_SITES = "tests/workflow/test_sites.py"


# the in-process average job first (-x stops there); the two sites' snakemakes after it
@mutant(
    "a_site_averages_only_its_own_clients",
    caught_by=[_SITES, "-k", "whole_round_not_only or two_sites"],
)
def _a_site_averages_only_its_own_clients() -> None:
    """Each site's average job trusts its own receipts, as one site hosting everyone does:
    every site averages its own clients alone, and the sites part ways."""
    import soma.workflow.averaging
    from soma.round import average_inputs

    def averaged(store, meeting, spec, inputs):
        return average_inputs(
            store, meeting, inputs, deadline=spec.timing.average_deadline, lease=spec.timing.lease
        )

    _replace(soma.workflow.averaging, "averaged", averaged)
