"""soma's SGD is torch.optim.SGD's arithmetic, bit for bit, without importing torch._dynamo."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from soma.sgd import SGD


@pytest.mark.parametrize(("momentum", "weight_decay"), [(0.0, 0.0), (0.9, 0.0), (0.9, 1e-3)])
def test_the_same_steps_as_torch_optim_sgd(momentum: float, weight_decay: float) -> None:
    torch.manual_seed(0)
    ours, theirs = nn.Linear(5, 3), nn.Linear(5, 3)
    theirs.load_state_dict(ours.state_dict())
    mine = SGD(ours.parameters(), lr=0.1, momentum=momentum, weight_decay=weight_decay)
    reference = torch.optim.SGD(
        theirs.parameters(), lr=0.1, momentum=momentum, weight_decay=weight_decay
    )
    for step in range(5):
        x = torch.randn(8, 5, generator=torch.Generator().manual_seed(step))
        for net, optimizer in ((ours, mine), (theirs, reference)):
            optimizer.zero_grad()
            net(x).pow(2).mean().backward()
            optimizer.step()
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)
    if momentum:
        assert set(mine.state) == set(ours.parameters())


@pytest.mark.slow
def test_a_training_run_does_not_import_dynamo() -> None:
    """The 2-second import that every (round, client) process would otherwise pay."""
    code = (
        "import sys; from soma.tasks import teacher as control; run = control.student(); "
        "run.fit(control.corner(0, 32, seed=0, teacher_net=control.teacher())); "
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
