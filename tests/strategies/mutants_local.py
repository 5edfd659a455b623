"""Broken variants of the local strategies (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_LOCAL = (
    "tests/strategies/test_strategies_local.py"  # each mutant's one by-hand test that catches it
)


@mutant(
    "fedprox_ignores_mu",
    caught_by=[_LOCAL, "-k", "fedprox_one_step_pulls_towards_the_start_by_hand"],
)
def _fedprox_ignores_mu() -> None:
    """The proximal term is never added: FedProx trains as FedAvg whatever mu says."""
    import soma.strategies.fedprox

    _replace(soma.strategies.fedprox.Proximal, "adjust", lambda self, parameters, lr: None)


@mutant(
    "scaffold_no_correction",
    caught_by=[_LOCAL, "-k", "scaffold_client_two_corrected_steps_and_its_new_variate_by_hand"],
)
def _scaffold_no_correction() -> None:
    """The steps are counted and the gradients summed, but never corrected by c - c_i:
    the variates are computed and sent, and nothing uses them."""
    import torch

    import soma.strategies.scaffold as scaffold

    @torch.no_grad()
    def adjust(self, parameters, lr):
        for node_id, keys in parameters.items():
            for key, parameter in keys.items():
                total = self.gradients.get((node_id, key))
                if total is None:
                    total = self.gradients[node_id, key] = self._pair(node_id, key)
                if scaffold.trainable(parameter):
                    total.add_(parameter.grad, alpha=float(lr))
        self.steps += 1
        self.rates += float(lr)

    _replace(scaffold.Correction, "adjust", adjust)


@mutant(
    "scaffold_server_forgets_c",
    caught_by=[_LOCAL, "-k", "scaffold_server_two_of_four_clients_by_hand"],
)
def _scaffold_server_forgets_c() -> None:
    """The server never moves c: every client is corrected towards a zero global direction."""
    import soma.strategies.scaffold

    _replace(soma.strategies.scaffold, "next_c", lambda c, total, clients: c)
