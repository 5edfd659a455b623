"""soma.slurm.limits: a partition read from scontrol's and sinfo's text, and the one limit a
submission's request goes past, named with the profile's key to change. No cluster needed."""

from __future__ import annotations

import pytest

from soma.slurm import Partition, Request, limits, minutes, partition_of

SCONTROL = (
    "PartitionName=debug AllowAccounts=ALL Default=YES MaxNodes=UNLIMITED MaxTime=UNLIMITED "
    "MaxCPUsPerNode=UNLIMITED Nodes=vm TotalCPUs=2 TotalNodes=1 MaxMemPerNode=UNLIMITED\n"
    "PartitionName=short Default=NO MaxTime=02:00:00 MaxCPUsPerNode=8 Nodes=n[1-2] "
    "TotalCPUs=64 MaxMemPerNode=64000\n"
)
SINFO = "debug*|vm|2|21695\nshort|n1|32|128000\nshort|n2|16|96000\n"


def request(**changes) -> Request:
    values = dict(what="group round0's submission", cpus=1, mem_mb=500, minutes=10)
    values.update(partition="debug", account="soma")
    values.update(changes)
    return Request(**values)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("30", 30),
        ("30:01", 31),
        ("02:00:00", 120),
        ("1-00", 1440),
        ("1-02:30", 1590),
        ("2-00:00:00", 2880),
    ],
)
def test_slurm_times_read_as_minutes(text, expected):
    assert minutes(text) == expected


def test_a_partition_is_its_largest_node_within_its_caps():
    debug = partition_of(None, SCONTROL, SINFO)
    assert debug == Partition("debug", cpus=2, mem_mb=21695, max_minutes=None)
    short = partition_of("short", SCONTROL, SINFO)
    assert short == Partition("short", cpus=8, mem_mb=64000, max_minutes=120)
    assert partition_of("gpu", SCONTROL, SINFO) is None


def test_a_request_that_fits_is_not_refused():
    debug = partition_of("debug", SCONTROL, SINFO)
    assert limits.refusal(request(cpus=2, mem_mb=20000, minutes=10_000), debug, {"soma"}) is None


def test_too_many_cpus_named_with_the_profile_keys():
    said = limits.refusal(request(cpus=4), partition_of("debug", SCONTROL, SINFO), None)
    assert "asks 4 CPUs" in said and "at most 2 CPUs" in said
    assert "`cores`" in said and "run's `threads`" in said and "partition debug" in said


def test_too_much_memory_named():
    said = limits.refusal(request(mem_mb=70_000), partition_of("short", SCONTROL, SINFO), None)
    assert "70000 MB" in said and "at most 64000 MB" in said and "`mem_mb`" in said


def test_too_long_named_and_a_groups_runtime_explained():
    short = partition_of("short", SCONTROL, SINFO)
    said = limits.refusal(request(minutes=121), short, None)
    assert "121 min" in said and "MaxTime of 120 min" in said and "`runtime`" in said
    assert "one after another added up" in said and "`cores`" in said
    assert limits.refusal(request(minutes=120), short, None) is None


def test_an_account_not_the_users_named():
    debug = partition_of("debug", SCONTROL, SINFO)
    said = limits.refusal(request(account="other"), debug, {"soma", "lab"})
    assert "account other" in said and "lab, soma" in said
    assert limits.refusal(request(account="other"), debug, None) is None  # accounting cannot say
