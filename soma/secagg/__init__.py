"""Secure aggregation: the sum of the clients' weighted exports, and nothing else, to anyone.

The protocol and its layout in the store: `soma.secagg.protocol` (which says where each of its
modules, `session`, `messages`, `roster`, `ring`, `masking`, `phases`, `consistency` and
`unmask`, comes in). The pieces: Shamir secret
sharing (`shamir`), fixed point in a ring and its overflow bound (`quantize`), the mask
generator (`masks`), the primitives taken from `cryptography` (`crypto`), the refusals
(`errors`). `cryptography` (`pip install 'soma[privacy]'`) is imported on first use only.

    from soma.secagg import secure_sum, average

    weighted, total = secure_sum(store, prefix, export, size, mine=k, members=range(10),
                                 threshold=6, deadline=600, lease=60)
    mean = average(weighted, total, like=export)
"""

from soma.secagg.errors import (
    BadInput,
    BelowThreshold,
    InconsistentShares,
    LeftOut,
    MaskedOnce,
    MissingCryptography,
    NotEnoughShares,
    SecAggError,
)
from soma.secagg.phases import advertise, masked_input, received_shares, reveal, share, withdraw
from soma.secagg.protocol import secure_sum
from soma.secagg.quantize import FixedPoint
from soma.secagg.ring import check_input
from soma.secagg.session import DEADLINE, Secrets, Session
from soma.secagg.unmask import average, published, result, unmask

__all__ = [
    "DEADLINE",
    "BadInput",
    "BelowThreshold",
    "FixedPoint",
    "InconsistentShares",
    "LeftOut",
    "MaskedOnce",
    "MissingCryptography",
    "NotEnoughShares",
    "SecAggError",
    "Secrets",
    "Session",
    "advertise",
    "average",
    "check_input",
    "masked_input",
    "published",
    "received_shares",
    "result",
    "reveal",
    "secure_sum",
    "share",
    "unmask",
    "withdraw",
]
