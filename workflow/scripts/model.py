"""The last round's average as a safetensors file plain PyTorch loads (rule `model`)."""

from soma import workflow
from soma.workflow.best_round import model

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    made = model(sm.config, sm.input[0], sm.output[0])
    print(f"{sm.output[0]}: {made}")
