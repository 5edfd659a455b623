"""What a store name may be: a relative text path of `/`-separated segments.

`cifar/round/3/client/0` is a name. Every name is a file under `<store>/names/`, so the
rules are the ones that keep a name one file in the folder it says, on every
filesystem a Slurm cluster mounts, and printable in a message:

- not empty, not absolute (no leading `/`), no empty segment (`a//b`, trailing `/`);
- no `.` or `..` segment, and no segment starting with `.` at all: those belong to the
  filesystem (NFS renames a file removed while open to `.nfsXXXX` in the same folder,
  and `bound` must never mistake one for a name);
- no backslash (a separator elsewhere); no control character (Unicode category `Cc`:
  NUL, U+0001-U+001F, DEL, U+0080-U+009F), no format character (`Cf`: the bidirectional
  overrides such as U+202E, the zero-width U+200B, ...) and no line or paragraph separator
  (U+2028, U+2029): they make `ls` and every message that shows the name lie about it;
- text that encodes to UTF-8 (no lone surrogates);
- each segment at most 255 bytes in UTF-8 (`MAX_SEGMENT_BYTES`: NAME_MAX, the longest file
  name on every filesystem that matters), and the whole name at most 1024 bytes
  (`MAX_NAME_BYTES`), so that `<store>/names/<name>` stays under PATH_MAX (4096 bytes) for
  any store folder of up to `MAX_STORE_PATH_BYTES` (3000 bytes; `Store` refuses a longer one).

Each is refused up front, with `BadName` saying which rule, before the filesystem is asked
(which would answer a long name with a bare ENAMETOOLONG).

A name is a file, so it cannot also be the folder of other names: once `a/b` is
bound, `a/b/c` is refused, and the other way round (`NameConflict`, raised by the store,
which is the one that can see it).

A run's name (`check_run_name`) is a name with room after it for what soma keeps under it
(`<run>/round/<r>/<meeting key>/client/<k>` and longer): at most `MAX_RUN_BYTES` (768)
bytes, and without a `round` segment, which would make it ambiguous where the run's name
ends.
"""

from __future__ import annotations

import unicodedata

from soma.store.errors import BadName

MAX_SEGMENT_BYTES = 255  # NAME_MAX on every filesystem that matters
MAX_NAME_BYTES = 1024  # <store>/names/<name> under PATH_MAX (4096) for any store folder...
MAX_STORE_PATH_BYTES = 3000  # ... up to this long (with room for `/names/` and `/tmp/...`)
# What soma puts after a run's name, at the longest
# `/round/<r>/<meeting key>/inputs/<inputs key>/computed/<16 hex>` (keys 64 hex), is 180
# bytes for r < 10**10 (soma.round, soma.round.once); 256 leaves room.
RUN_SUFFIX_BYTES = 256
MAX_RUN_BYTES = MAX_NAME_BYTES - RUN_SUFFIX_BYTES

_HIDDEN = {"Cc": "control", "Cf": "format", "Zl": "line separator", "Zp": "paragraph separator"}


def _shown(text: str) -> str:
    """`text` as a message shows it: its repr, cut short past what a name may be."""
    if len(text) <= MAX_NAME_BYTES:
        return repr(text)
    return f"{text[:40]!r}... ({len(text)} characters)"


def _segment_problem(segment: str) -> str | None:
    """Why `segment` cannot be one segment of a name, or None if it can."""
    if segment == "":
        return "has an empty segment"
    if segment in (".", ".."):
        return f"has a {segment!r} segment"
    if segment.startswith("."):
        return f"has a segment starting with '.' ({_shown(segment)}); those are the filesystem's"
    return _text_problem(segment) or _segment_length_problem(segment)


def _segment_length_problem(segment: str) -> str | None:
    size = len(segment.encode("utf-8"))
    if size <= MAX_SEGMENT_BYTES:
        return None
    return (
        f"has a segment of {size} bytes in UTF-8 ({segment[:20]!r}...); a segment is at most "
        f"{MAX_SEGMENT_BYTES} bytes, the longest file name a filesystem allows"
    )


def _text_problem(text: str) -> str | None:
    if "\\" in text:
        return "has a backslash"
    problem = _hidden_character_problem(text)
    if problem:
        return problem
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def _hidden_character_problem(text: str) -> str | None:
    """A character that does not show as itself (it would make `ls` lie), named by code point."""
    if text.isascii() and text.isprintable():  # every name soma spells: no control there
        return None
    for at, ch in enumerate(text):
        kind = _HIDDEN.get(unicodedata.category(ch))
        if kind:
            called = unicodedata.name(ch, "")
            called = f" ({called})" if called else ""
            return f"has a {kind} character U+{ord(ch):04X}{called} at position {at}"
    return None


def _length_problem(text: str) -> str | None:
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size <= MAX_NAME_BYTES:
        return None
    return (
        f"is {size} bytes in UTF-8; a name is at most {MAX_NAME_BYTES} bytes, so that its "
        "file's path stays under PATH_MAX"
    )


def _plain(name: str) -> bool:
    """Whether `name` is printable ASCII without a backslash, relative, within the lengths,
    and no segment of it empty or starting with '.': a name `check_name` passes (~1 us,
    where the whole look costs ~10; a round reads and writes ~100 names a contribution)."""
    if not (name.isascii() and name.isprintable()) or "\\" in name:
        return False
    if name.startswith("/") or len(name) > MAX_NAME_BYTES:
        return False
    return all(s and s[0] != "." and len(s) <= MAX_SEGMENT_BYTES for s in name.split("/"))


def check_name(name: object) -> str:
    """Return `name` if it is a valid store name, else raise `BadName` saying why."""
    if isinstance(name, str) and _plain(name):  # every name soma spells: the rest below
        return name
    if not isinstance(name, str):
        raise BadName(f"a name is text, not {type(name).__name__}: {name!r}")
    if name == "":
        raise BadName("a name cannot be empty")
    if name.startswith("/"):
        raise BadName(f"name {_shown(name)} is absolute; names are relative to the store")
    problem = _length_problem(name)
    if problem:
        raise BadName(f"name {_shown(name)} {problem}")
    for segment in name.split("/"):
        problem = _segment_problem(segment)
        if problem:
            raise BadName(f"name {_shown(name)} {problem}")
    return name


def check_run_name(run: object) -> str:
    """Return `run` if it can name a run, else raise `BadName` saying why: a valid name,
    short enough for what soma keeps under it, and without a `round` segment."""
    check_name(run)
    size = len(run.encode("utf-8"))
    if size > MAX_RUN_BYTES:
        raise BadName(
            f"run name {_shown(run)} is {size} bytes in UTF-8; a run's name is at most "
            f"{MAX_RUN_BYTES}, which leaves room for the names soma keeps under it"
        )
    if "round" in run.split("/"):
        raise BadName(f"run name {run!r} has a 'round' segment, where a run's rounds begin")
    return run


def split_prefix(prefix: object) -> tuple[list[str], str]:
    """Split a `bound` prefix into its whole segments and the partial last one.

    `"cifar/round/3/"` -> (["cifar", "round", "3"], ""); `"cifar/ro"` -> (["cifar"], "ro").
    The whole segments follow the name rules; the partial one may be empty.
    """
    if not isinstance(prefix, str):
        raise BadName(f"a prefix is text, not {type(prefix).__name__}: {prefix!r}")
    if prefix.startswith("/"):
        raise BadName(f"prefix {_shown(prefix)} is absolute; names are relative to the store")
    problem = _length_problem(prefix)
    if problem:
        raise BadName(f"prefix {_shown(prefix)} {problem}")
    *whole, partial = prefix.split("/")
    for segment in whole:
        problem = _segment_problem(segment)
        if problem:
            raise BadName(f"prefix {_shown(prefix)} {problem}")
    if partial:
        problem = (
            _text_problem(partial)
            or _segment_length_problem(partial)
            or ("starts its last segment with '.'" if partial.startswith(".") else None)
        )
        if problem:
            raise BadName(f"prefix {_shown(prefix)} {problem}")
    return whole, partial
