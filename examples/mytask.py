# mytask.py: noisy linear regression, each client holding a shifted slice of the inputs
import torch
from torch import nn

from soma import TrainingRun

TRUE_WEIGHTS = torch.tensor([[2.0], [-1.0], [0.5]])


def _data(seed: int, count: int, shift: float):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(count, 3, generator=generator) + shift
    noise = 0.1 * torch.randn(count, 1, generator=generator)
    return inputs, inputs @ TRUE_WEIGHTS + noise


class LinearTask:
    def __init__(self, examples: int = 100, epochs: int = 2, lr: float = 0.02):
        self.examples, self.epochs, self.lr = examples, epochs, lr

    def nodes(self, seed):
        torch.manual_seed(seed)
        return {"fc": nn.Linear(3, 1)}

    def shard(self, client, clients):
        return _data(seed=client, count=self.examples, shift=client - clients / 2)

    def everything(self, clients):  # every client's shard, as one
        shards = [self.shard(k, clients) for k in range(clients)]
        return torch.cat([x for x, _ in shards]), torch.cat([y for _, y in shards])

    def size(self, data):
        return len(data[0])

    def train(self, nodes, data, *, seed, objective=None):
        run = TrainingRun(
            nodes,
            loss=nn.functional.mse_loss,
            lr=self.lr,
            epochs=self.epochs,
            seed=seed,
            objective=objective,  # a strategy's client side (FedProx, SCAFFOLD), or None
        )
        return run.fit(data)

    def evaluate(self, nodes):
        inputs, targets = _data(seed=999, count=500, shift=0.0)
        run = TrainingRun(nodes, loss=nn.functional.mse_loss)
        return {"loss": float(run.evaluate((inputs, targets)))}


def make(**options):
    return LinearTask(**options)
