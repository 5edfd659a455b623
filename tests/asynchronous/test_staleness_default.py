"""The staleness weight's default: declared once (soma.config.asynchronous.Buffered), read by
the config's parser, and said by the how-to's table of settings. Its value was chosen from
`benchmarks/asynchronous.py --study` (docs/benchmarks/asynchronous.md): a change to it is a
change to that page's decision, which this test makes visible."""

from __future__ import annotations

import re
from pathlib import Path

from soma.config import asynchronous
from soma.config.asynchronous import Buffered, from_options

HOW_TO = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "asynchronous.md"
CHOSEN = 0.25  # docs/benchmarks/asynchronous.md: polynomial, a 0.25 (not FedBuff's 0.5)


def test_the_default_weight_is_the_one_the_benchmark_chose_and_every_reader_gets_it() -> None:
    assert (Buffered(1).kind, Buffered(1).a) == ("polynomial", CHOSEN)
    assert asynchronous.buffered({"buffer": 1}) == Buffered(1)
    assert asynchronous.buffered({"buffer": 1, "staleness": {"kind": "polynomial"}}).a == CHOSEN
    assert asynchronous.buffered(from_options(1, "polynomial", None, 1.0)).a == CHOSEN


def test_the_how_to_table_says_the_declared_defaults() -> None:
    table = HOW_TO.read_text()
    a = re.search(r"^\| `asynchronous\.staleness\.a` \| ([0-9.]+) \|", table, re.MULTILINE)
    kind = re.search(r"^\| `asynchronous\.staleness\.kind`[^|]*\| `(\w+)` \|", table, re.MULTILINE)
    assert a is not None and kind is not None, f"{HOW_TO} lost its staleness rows"
    assert (kind.group(1), float(a.group(1))) == (Buffered.kind, Buffered.a)


def test_the_command_lines_help_says_the_declared_default() -> None:
    import argparse

    from soma.cli.asynchronous import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser, simulated=True)
    (staleness,) = [a for a in parser._actions if "--staleness" in a.option_strings]
    assert f"A {Buffered.a:g} by default" in staleness.help
