# myloop.py: mytask's regression trained by a loop of its own instead of TrainingRun,
# which still runs every strategy: a client side (FedProx, SCAFFOLD) is applied each step
import torch
from mytask import LinearTask
from torch import nn

from soma.training import adjust_on_cpu, keyed_parameters


class LoopTask(LinearTask):
    def train(self, nodes, data, *, seed, objective=None):
        inputs, targets = data
        model = nodes["fc"]
        parameters = keyed_parameters(nodes)  # keyed like soma.export, as objectives need
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr)
        order = torch.Generator().manual_seed(seed)
        for _ in range(self.epochs):
            for batch in torch.randperm(len(inputs), generator=order).split(32):
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(inputs[batch]), targets[batch])
                loss.backward()
                if objective is not None:  # after backward, before step, at this step's rate
                    adjust_on_cpu(objective, parameters, optimizer.param_groups[0]["lr"])
                optimizer.step()
        return {"loss": float(loss.detach())}


def make(**options):
    return LoopTask(**options)
