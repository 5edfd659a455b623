"""The generated references (the CLI from its parser, the config keys from the schema, the
API page from `soma.__all__`) are what the code says now: a drift fails, naming the command
that regenerates them."""

from __future__ import annotations

import shutil

import docs_pages


def test_the_generated_references_are_current() -> None:
    stale = docs_pages.generator().differing()
    assert not stale, f"{', '.join(stale)} stale: run `python docs/gen_reference.py`, commit"


def test_a_stale_page_is_named(tmp_path, monkeypatch) -> None:
    generator = docs_pages.generator()
    shutil.copytree(generator.REFERENCE, tmp_path, dirs_exist_ok=True)
    page = tmp_path / "config.md"
    page.write_text(page.read_text().replace("| `rounds` |", "| `rondes` |"))
    monkeypatch.setattr(generator, "REFERENCE", tmp_path)
    assert generator.differing() == ["docs/reference/config.md"]


def test_the_cli_page_names_every_command() -> None:
    from soma.cli.parser import parser

    text = (docs_pages.DOCS / "reference" / "cli.md").read_text()
    commands = next(a for a in parser()._subparsers._group_actions).choices
    for name in commands:
        assert f"## `soma {name}`" in text, name
