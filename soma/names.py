"""What a store name may be: a relative text path of `/`-separated segments.

`cifar/round/3/client/0` is a name. Every name is a file under `<store>/names/`, so the
rules are the ones that keep a name one file in the folder it says, on every
filesystem a Slurm cluster mounts, and printable in a message:

- not empty, not absolute (no leading `/`), no empty segment (`a//b`, trailing `/`);
- no `.` or `..` segment, and no segment starting with `.` at all: those belong to the
  filesystem (NFS renames a file removed while open to `.nfsXXXX` in the same folder,
  and `bound` must never mistake one for a name);
- no backslash (a separator elsewhere), no NUL or other control character (`Cc`);
- text that encodes to UTF-8 (no lone surrogates), each segment at most 255 bytes.

A name is a file, so it cannot also be the folder of other names: once `a/b` is
bound, `a/b/c` is refused, and the other way round (`NameConflict`, raised by the store,
which is the one that can see it).
"""

from __future__ import annotations

import unicodedata

from soma.store_errors import BadName

MAX_SEGMENT_BYTES = 255  # NAME_MAX on every filesystem that matters


def _segment_problem(segment: str) -> str | None:
    """Why `segment` cannot be one segment of a name, or None if it can."""
    if segment == "":
        return "has an empty segment"
    if segment in (".", ".."):
        return f"has a {segment!r} segment"
    if segment.startswith("."):
        return f"has a segment starting with '.' ({segment!r}); those are the filesystem's"
    return _text_problem(segment) or (
        f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES
        else None
    )


def _text_problem(text: str) -> str | None:
    if "\\" in text:
        return "has a backslash"
    for ch in text:
        if unicodedata.category(ch) == "Cc":
            return f"has a control character {ch!r}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def check_name(name: object) -> str:
    """Return `name` if it is a valid store name, else raise `BadName` saying why."""
    if not isinstance(name, str):
        raise BadName(f"a name is text, not {type(name).__name__}: {name!r}")
    if name == "":
        raise BadName("a name cannot be empty")
    if name.startswith("/"):
        raise BadName(f"name {name!r} is absolute; names are relative to the store")
    for segment in name.split("/"):
        problem = _segment_problem(segment)
        if problem:
            raise BadName(f"name {name!r} {problem}")
    return name


def split_prefix(prefix: object) -> tuple[list[str], str]:
    """Split a `bound` prefix into its whole segments and the partial last one.

    `"cifar/round/3/"` -> (["cifar", "round", "3"], ""); `"cifar/ro"` -> (["cifar"], "ro").
    The whole segments follow the name rules; the partial one may be empty.
    """
    if not isinstance(prefix, str):
        raise BadName(f"a prefix is text, not {type(prefix).__name__}: {prefix!r}")
    if prefix.startswith("/"):
        raise BadName(f"prefix {prefix!r} is absolute; names are relative to the store")
    *whole, partial = prefix.split("/")
    for segment in whole:
        problem = _segment_problem(segment)
        if problem:
            raise BadName(f"prefix {prefix!r} {problem}")
    if partial:
        problem = _text_problem(partial) or (
            "starts its last segment with '.'" if partial.startswith(".") else None
        )
        if problem:
            raise BadName(f"prefix {prefix!r} {problem}")
    return whole, partial
