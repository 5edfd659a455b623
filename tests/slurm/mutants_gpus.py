"""Broken variants of a job's own GPU in a step that shares its GPUs (soma.device, issue 53)."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "gpu_slot_always_the_first",
    caught_by=["tests/test_device.py", "-k", "shares_its_gpus"],
)
def _gpu_slot_always_the_first() -> None:
    """Every job takes the step's first GPU, as the local executor left it: all on cuda:0."""
    import soma.device as devices

    def gpu_slot(environ, folder=None):
        visible = [g for g in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        if environ.get(devices.SLOTS_ENV) != "1" or len(visible) < 2:
            return None
        return visible[0], open(folder / "first", "a")  # noqa: SIM115

    _replace(devices, "gpu_slot", gpu_slot)
