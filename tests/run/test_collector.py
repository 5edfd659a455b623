"""A run's rounds leave the heap made before them to the cyclic collector's sight only
after the run (soma.run.collector): frozen while the rounds run, as it was once they end, however
they end."""

from __future__ import annotations

import gc

import pytest

import soma

RUN = {"clients": 3, "rounds": 2, "durability": "scratch"}


def test_the_heap_is_frozen_while_the_rounds_run_and_as_it_was_after(tmp_path) -> None:
    before = gc.get_freeze_count()
    during: list[int] = []
    soma.simulate("soma.tasks.control", **RUN, store=tmp_path / "s",
                  after=lambda done, driven: during.append(gc.get_freeze_count()))  # fmt: skip
    assert len(during) == 2 and all(n > before for n in during), (before, during)
    assert gc.get_freeze_count() == before


def test_a_run_that_fails_unfreezes_the_heap_too(tmp_path) -> None:
    class Stop(Exception):
        pass

    def fail(done, driven) -> None:
        raise Stop

    before = gc.get_freeze_count()
    with pytest.raises(Stop):
        soma.simulate("soma.tasks.control", **RUN, store=tmp_path / "s", after=fail)
    assert gc.get_freeze_count() == before
