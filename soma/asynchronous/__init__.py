"""Asynchronous rounds with nobody in charge: buffered aggregation (FedBuff) over the store.

A client trains from the latest published version at its own pace and contributes an update;
whoever finds `buffer` pending updates makes the next version, exactly once (soma.round.once's
claim, takeover and lease), and its record names every update it consumed, with its
staleness and weight, so that the run replays bit for bit from its records
(soma.asynchronous.replay, which `soma audit` runs). Settings: soma.config.asynchronous.

    arithmetic   the server step (pure)
    versions     versions and updates in the store; making a version once
    clients      `soma client`'s loop of hosted clients
    clock        `soma simulate`'s simulated clock
    replay       a run recomputed and checked from its records
    signed       updates and versions signed with the run's roster, checked before use
"""
