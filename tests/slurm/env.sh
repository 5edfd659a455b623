# shellcheck shell=sh
# Source this (`. tests/slurm/env.sh`) to point Slurm commands at the test
# cluster started by tests/slurm/start.sh. Optional: start.sh also symlinks
# /etc/slurm/slurm.conf to the same file, so plain `sbatch`/`sacct`/... (as the
# snakemake slurm executor runs them) work without it. It is needed only when
# start.sh warned that /etc/slurm/slurm.conf belongs to someone else.
export SLURM_CONF="${SOMA_SLURM_STATE:-/tmp/soma-slurm}/etc/slurm.conf"
# Names start.sh gives the partition and the accounting account (for
# snakemake: --default-resources slurm_partition=... slurm_account=...).
export SOMA_SLURM_PARTITION="${SOMA_SLURM_PARTITION:-debug}"
export SOMA_SLURM_ACCOUNT="${SOMA_SLURM_ACCOUNT:-soma}"
