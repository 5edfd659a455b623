"""Broken variants of signed records (registered into tests/mutants.py's MUTANTS).

Each keeps runs going: only the refusal it breaks can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/round/test_signing.py::"
_FORGED = _T + "test_a_forged_client_record_is_refused_naming_the_client_and_the_key"


@mutant("sign_check_accepts_any_key", caught_by=[_FORGED + "[key not on the roster]"])
def _sign_check_accepts_any_key() -> None:
    """A record signed by any valid key passes, the roster never consulted."""
    import soma.round.signing as mod

    original = mod.check

    def check(store, signing, digest, *, name, writer, what):
        if signing is None:
            return
        from soma.store import codecs

        tree, _ = codecs.parse_record(store.get(digest), what)
        key = (tree.get(mod.SIGNED) or {}).get("key") if isinstance(tree, dict) else None
        if key is not None:
            roster = dict(signing.roster)
            roster[writer if writer is not None else -1] = key
            signing = mod.Signing(tuple(sorted(roster.items())), signing.keys)
        original(store, signing, digest, name=name, writer=writer, what=what)

    _replace(mod, "check", check)


@mutant("sign_check_ignores_the_writer", caught_by=[_FORGED + "[another client's key]"])
def _sign_check_ignores_the_writer() -> None:
    """Any roster member's signature passes for any client's record."""
    import soma.round.signing as mod

    original = mod.check

    def check(store, signing, digest, *, name, writer, what):
        original(store, signing, digest, name=name, writer=None, what=what)

    _replace(mod, "check", check)


@mutant("sign_check_accepts_unsigned", caught_by=[_FORGED + "[unsigned]"])
def _sign_check_accepts_unsigned() -> None:
    """A record with no signature is taken as it is."""
    import soma.round.signing as mod

    original = mod.check

    def check(store, signing, digest, *, name, writer, what):
        from soma.store import codecs

        tree, _ = codecs.parse_record(store.get(digest), what)
        if isinstance(tree, dict) and mod.SIGNED in tree:
            original(store, signing, digest, name=name, writer=writer, what=what)

    _replace(mod, "check", check)


@mutant("sign_covers_the_name_only", caught_by=[_FORGED + "[changed after signing]"])
def _sign_covers_the_name_only() -> None:
    """The signature covers where a record is kept, not what it says."""
    import soma.round.signing as mod

    original = mod._message
    _replace(mod, "_message", lambda name, tree, loose, run: original(name, None, None, run))


@mutant("sign_covers_the_record_only", caught_by=[_FORGED + "[moved from another round]"])
def _sign_covers_the_record_only() -> None:
    """The signature covers what a record says, not where: a record replays into any round."""
    import soma.round.signing as mod

    original = mod._message
    _replace(mod, "_message", lambda name, tree, loose, run: original("", tree, loose, run))


@mutant(
    "sign_no_consistency_check",
    caught_by=[_T + "test_clients_shown_different_survivors_refuse_to_reveal"],
)
def _sign_no_consistency_check() -> None:
    """Clients reveal without comparing the survivors they were shown."""
    from soma.secagg import consistency

    def consistent(store, session, mine, masked, *, deadline=600.0, backoff=None, sleep=None):
        return []

    _replace(consistency, "consistent", consistent)


@mutant(
    "sign_average_not_checked",
    caught_by=[_T + "test_an_average_signed_by_nobody_on_the_roster_is_refused"],
)
def _sign_average_not_checked() -> None:
    """Whatever average the store names is taken, signed by anyone or nobody."""
    import soma.round.signed

    _replace(soma.round.signed, "check_average", lambda store, meeting, digest: digest)


@mutant(
    "sign_workflow_inputs_not_checked",
    caught_by=[_T + "test_the_workflows_inputs_must_be_what_the_clients_signed"],
)
def _sign_workflow_inputs_not_checked() -> None:
    """The average job averages whatever weights its receipts name, signed or not."""
    import soma.round.signed

    _replace(soma.round.signed, "check_signed_inputs", lambda store, meeting, inputs: None)
