"""soma under Slurm's executor for Snakemake: every submission a run will make checked
against its partition before the first is made (soma.slurm.submissions, from the Snakefile's
`onstart`), refused with a `soma: ...` line naming the limit and the profile's key; and after
a run, what its submissions asked against what they used (soma.slurm.usage, `soma slurm
usage`)."""

from soma.slurm.limits import Partition, Request, SlurmRefused, minutes, partition_of, refusal

__all__ = ["Partition", "Request", "SlurmRefused", "minutes", "partition_of", "refusal"]
