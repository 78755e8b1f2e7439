"""The warm-up, capture and fallback of :class:`gpu_runtime.cuda_graph.GraphRunner`, with a
stand-in for the graph: the life of a captured step, without a GPU."""

from __future__ import annotations

import warnings

import pytest

from gpu_runtime.cuda_graph import GraphRunner


class FakeGraph:
    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


class Step:
    """Runs steps through a runner as the train step and the rollout do; records what ran."""

    def __init__(self, runner: GraphRunner, failures: list[str]) -> None:
        self.runner = runner
        self.failures = list(failures)  # the messages of the next captures' RuntimeErrors
        self.log: list[str] = []
        self.graphs: list[FakeGraph] = []

    def record(self) -> FakeGraph:
        self.log.append("capture")
        if self.failures:
            raise RuntimeError(self.failures.pop(0))
        self.graphs.append(FakeGraph())
        return self.graphs[-1]

    def __call__(self) -> None:
        if self.runner.ready(self.record):
            self.runner.replay()
            self.log.append("replay")
        else:
            self.runner.run_eager(lambda: self.log.append("eager"))


def test_warm_up_then_capture_once_then_replay() -> None:
    step = Step(GraphRunner("the step", "running it eagerly", warmup_steps=2), [])
    for _ in range(5):
        step()
    assert step.log == ["eager", "eager", "capture", "replay", "replay", "replay"]
    assert step.graphs[0].replays == 3 and not step.runner.failed


def test_a_failed_capture_warns_once_and_stays_eager() -> None:
    step = Step(GraphRunner("the step", "running it eagerly", warmup_steps=1), ["no capture"])
    with pytest.warns(UserWarning, match="CUDA graph capture of the step failed, running it "):
        step()
        step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step()
        step()
    assert step.log == ["eager", "capture", "eager", "eager", "eager"]
    assert step.runner.failed and step.runner.graph is None


def test_a_recompile_during_capture_costs_one_more_warm_up_step() -> None:
    runner = GraphRunner("the step", "running it eagerly", warmup_steps=2, recompile_retries=1)
    step = Step(runner, ["Detected recompile when torch.compile stance is 'fail_on_recompile'"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a retried capture does not warn
        for _ in range(5):
            step()
    # The step whose capture was refused runs eagerly, then one more warm-up step.
    assert step.log == ["eager", "eager", "capture", "eager", "eager", "capture", "replay"]


def test_release_captures_anew_with_or_without_a_new_warm_up() -> None:
    step = Step(GraphRunner("the step", "running it eagerly", warmup_steps=2), [])
    for _ in range(3):
        step()
    step.runner.release()  # a new batch size, say: new tensors to compile for
    for _ in range(3):
        step()
    step.runner.release(warm_up_again=False)  # what the warm-up made still exists
    step()
    assert step.log == [
        *["eager", "eager", "capture", "replay"],
        *["eager", "eager", "capture", "replay"],
        *["capture", "replay"],
    ]
