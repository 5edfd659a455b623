"""The last round's average as a safetensors file plain PyTorch loads (rule `model`)."""

from soma import model, workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    made = model.export_receipt(sm.config["store"], sm.input[0], sm.output[0])
    print(f"{sm.output[0]}: {made}")
