"""Broken variants of secure aggregation (registered into tests/mutants.py's MUTANTS).

Each one keeps the protocol running to the end, so that only the guarantee it breaks can
catch it: a sum that is wrong, or a sum that is right while the store gives a client away.
"""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/secagg/test_secagg.py::"
_PIECES = "tests/secagg/test_secagg_pieces.py::"


@mutant(
    "secagg_masks_do_not_cancel",
    caught_by=[
        _T + "test_the_secure_sum_is_the_weighted_sum_and_its_mean_is_fedavg_within_the_bound"
    ],
)
def _secagg_masks_do_not_cancel() -> None:
    """Both clients of a pair add their mask (the sign is always +1): the masks never cancel,
    and the dropped clients' masks are taken off with the same wrong sign."""
    import soma.secagg.masks

    _replace(soma.secagg.masks, "pairwise_sign", lambda mine, other: 1)


@mutant(
    "secagg_no_self_mask",
    caught_by=[
        _T + "test_a_late_masked_input_stays_hidden_by_its_self_mask_though_its_pairwise_masks"
        "_are_revealed"
    ],
)
def _secagg_no_self_mask() -> None:
    """No self-mask, on either side: the sum is still right, and a masked input that comes too
    late is bare once the dropped client's pairwise masks are rebuilt from the store."""
    from soma.secagg import masking

    _replace(masking, "add_self_mask", lambda flat, secrets: None)
    _replace(masking, "remove_self_masks", lambda acc, seeds: None)


@mutant(
    "secagg_shares_in_the_clear",
    caught_by=[_T + "test_no_share_or_secret_that_must_stay_secret_is_in_the_store_in_the_clear"],
)
def _secagg_shares_in_the_clear() -> None:
    """The shares are written as they are, not encrypted to their recipient: the protocol
    runs, and anyone reading the folder holds every share of every secret."""
    from soma.secagg import crypto

    _replace(crypto, "seal", lambda key, plaintext, associated: plaintext)
    _replace(crypto, "open_", lambda key, sealed, associated: sealed)


@mutant(
    "secagg_writes_the_export",
    caught_by=[_T + "test_no_blob_in_the_store_is_or_correlates_with_any_clients_export"],
)
def _secagg_writes_the_export() -> None:
    """No mask at all, and none taken off: the sum is right, and the 'masked' inputs are the
    quantized exports themselves."""
    from soma.secagg import masking

    _replace(masking, "add_self_mask", lambda flat, secrets: None)
    _replace(masking, "add_pairwise_masks", lambda flat, secrets, keys, sharers: None)
    _replace(masking, "remove_self_masks", lambda acc, seeds: None)
    _replace(
        masking,
        "remove_dropped_masks",
        lambda acc, session, dropped, keys, contributors: None,
    )


@mutant(
    "secagg_no_overflow_bound",
    caught_by=[
        _PIECES + "test_sums_at_the_bound_never_wrap_and_come_back_exact",
        _PIECES + "test_the_overflow_bound_is_the_ring_shared_among_the_members",
    ],
)
def _secagg_no_overflow_bound() -> None:
    """Each party may fill the whole ring: a sum of several wraps around, unrefused."""
    import soma.secagg.quantize as quantize

    _replace(quantize.FixedPoint, "limit", lambda self, parties: 2 ** (self.ring_bits - 1) - 1)
