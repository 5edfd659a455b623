"""The run layer: how a run (soma.config describes it) is driven, the same in every mode.

Its deep check (`checked`: the task and the strategy made and checked together), one
client's part in a round and the one drop-out rule (`step`), the round loop (`drive`) shared
by `soma client`, the workflow's jobs and `soma simulate` (`simulate`), who took part
(`attendance`), personal nodes (`personal`) and federated evaluation (`evaluation`).
"""
