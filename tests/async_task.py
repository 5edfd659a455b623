"""soma.tasks.control with a random delay in every training (drawn from the operating system,
so racing processes interleave differently at every run), and a client that hangs in its
training when asked (`hang`): for tests of asynchronous clients (tests/asynchronous)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from soma.tasks.control import ControlTask


@dataclass
class SlowTask(ControlTask):
    delay: float = 0.2
    hang: int = -1

    def train(self, nodes, data, *, seed, objective=None, context=None):
        if context is not None and context.client == self.hang:
            time.sleep(3600)  # killed by the test while training
        time.sleep(random.SystemRandom().uniform(0, self.delay))
        return super().train(nodes, data, seed=seed, objective=objective)


def make(**options) -> SlowTask:
    return SlowTask(**options)
