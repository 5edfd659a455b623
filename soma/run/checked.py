"""The deep check of a run (RunSpec.checked): what needs torch and the task itself.

`RunSpec.check()` is pure and runs at parse time; this is what the `start` job and `soma
client` do next, before they write anything: the task imports and takes its options and can
serve the clients, the strategy takes its options, fits the task, and steps from the mean
under a tree or secure aggregation; personal nodes are the task's; the task can be
evaluated somehow. Each refusal names the config key or the option (`spec.named`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soma.config.spec import RunSpec
    from soma.strategies import Strategy
    from soma.tasks import Task


def checked(spec: RunSpec) -> tuple[Task, Strategy]:
    """`spec.check()`, then the task and the strategy made and checked together (see the
    module): what the `start` job and `soma client` do before they write anything."""
    from soma.round import RoundError, tree_refusal
    from soma.secagg.round import check_strategy
    from soma.strategies import (
        StrategyError,
        check_task_takes_objective,
        load_strategy,
        takes_mean,
    )
    from soma.tasks import TaskError, TaskNotFound, load_task

    spec.check()
    try:
        task = load_task(spec.task, dict(spec.task_options))
    except TaskNotFound as error:
        raise spec.refused(f"{spec.named('task')}: {error}") from error
    except TaskError as error:  # OptionsRefused, or whatever else the task refused
        raise spec.refused(
            f"{spec.named('task_options')} (under {spec.task!r}): {error}"
        ) from error
    try:
        strategy = load_strategy(spec.strategy, dict(spec.strategy_options))
    except StrategyError as error:
        raise spec.refused(
            f"{spec.named('strategy', 'strategy_options')} (under {spec.strategy!r}): {error}"
        ) from error
    try:
        check_task_takes_objective(spec.strategy, strategy, task)
    except StrategyError as error:
        raise spec.refused(f"{spec.named('strategy', 'task')}: {error}") from error
    if spec.tree is not None and not takes_mean(strategy):
        raise spec.refused(f"{spec.named('strategy', 'tree')}: {tree_refusal(spec.strategy)}")
    if spec.secure is not None:
        try:
            check_strategy(spec.strategy, strategy)
        except RoundError as error:
            raise spec.refused(f"{spec.named('strategy', 'secure')}: {error}") from None
    _check_clients(spec, task)
    if spec.personal:
        from soma.run.personal import refusal

        why = refusal(spec.personal, task.nodes(spec.seed), spec.strategy, strategy)
        if why is not None:
            raise spec.refused(f"{spec.named('personal')}: {why}")
    _check_evaluation(spec, task)
    return task, strategy


def _check_evaluation(spec: RunSpec, task: Task) -> None:
    """A task that can be evaluated somehow; the tracking extra, when tracking is asked."""
    from soma.run.evaluation import has_central, has_local
    from soma.tracking import TrackingError, check_available

    if not (has_central(task) or has_local(task)):
        raise spec.refused(
            f"{spec.named('task')}: task {spec.task!r} has neither evaluate(nodes) nor "
            "evaluate_local(nodes, client, clients) (see soma.tasks)"
        )
    if spec.site is not None and not has_central(task):
        raise spec.refused(
            f"{spec.named('site', 'task')}: task {spec.task!r} has no evaluate(nodes), and "
            "a site's workflow evaluates only centrally (each site's clients keep their own "
            "records; the round's is not in its receipts): run its sites as `soma client`"
        )
    if spec.tracking is not None:
        try:
            check_available()
        except TrackingError as error:
            raise spec.refused(f"{spec.named('tracking')}: {error}") from None


def _check_clients(spec: RunSpec, task: Task) -> None:
    """The task's own check that its options can serve this many clients, if it has one."""
    from soma.tasks import TaskError

    check = getattr(task, "check", None)
    if not callable(check):
        return
    try:
        check(spec.clients)
    except (TaskError, ValueError) as error:
        raise spec.refused(
            f"{spec.named('clients', 'task_options')} (under {spec.task!r}): {error}"
        ) from error
