"""The serving-loop simulator under Hypothesis' state machine: bugs that need history are found on a
simulated run and shrunk to a few scheduler steps; the torch backend stays clean."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from trace_bugs import StaleGraphRowBackend, StaleMirrorBackend

from kvtable.backends.profiles import get_profile
from kvtable.backends.torch_backend import TorchBackend
from kvtable.trace.check import TraceJudge
from kvtable.trace.recorder import Recorder
from kvtable.trace.simulate import SimConfig, Simulator

CONFIG = SimConfig(max_len=24, max_live=3, pool_pages=32, capture_sizes=(2,))
SETTINGS = settings(max_examples=200, stateful_step_count=8, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def machine(make_backend: type) -> type[RuleBasedStateMachine]:
    """A state machine whose rules are scheduler actions on ``make_backend()``; each step is judged as it comes."""

    class Serving(RuleBasedStateMachine):
        runs: list[int] = []

        def __init__(self) -> None:
            super().__init__()
            self.recorder = Recorder(None, groups=CONFIG.groups)
            self.sim = Simulator(make_backend(), self.recorder, seed=0, config=CONFIG)
            self.judge = TraceJudge(get_profile("kvtable"), "correct", CONFIG.groups)
            self.seen = 0
            self.actions = 0

        def _running(self) -> list:
            return [r for r in self.sim.live if r.done >= r.prompt]

        def _prefilling(self) -> list:
            return [r for r in self.sim.live if r.done < r.prompt]

        @rule(prompts=st.lists(st.integers(1, 8), min_size=1, max_size=2), share=st.booleans())
        def arrive(self, prompts: list[int], share: bool) -> None:
            for prompt in prompts:
                self.sim.arrive(prompt, share)

        @precondition(lambda self: self._prefilling())
        @rule()
        def prefill(self) -> None:
            self.sim.prefill(self._prefilling())

        @precondition(lambda self: self._running())
        @rule(limit=st.integers(1, 2))
        def decode(self, limit: int) -> None:
            self.sim.decode(self._running()[:limit], graph=True)

        @precondition(lambda self: self._running())
        @rule(limit=st.integers(1, 2))
        def decode_eager(self, limit: int) -> None:
            self.sim.decode(self._running()[:limit], graph=False)

        @precondition(lambda self: self._running())
        @rule(graph=st.booleans(), limit=st.integers(1, 2))
        def verify(self, graph: bool, limit: int) -> None:
            self.sim.verify(self._running()[:limit], graph)

        @precondition(lambda self: self._running())
        @rule()
        def finish_first(self) -> None:
            self._running()[0].target = self._running()[0].done
            self.sim.finish()

        @invariant()
        def every_step_judged_clean(self) -> None:
            self.actions += 1
            type(self).runs.append(self.actions)
            steps = self.recorder.writer.steps
            for step in steps[self.seen:]:
                found = self.judge.feed(step)
                assert not found, found[0].text()
            self.seen = len(steps)

    return Serving


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "rule"), [(StaleGraphRowBackend, "safety"), (StaleMirrorBackend, "safety")])
def test_history_bugs_are_found_and_shrunk_to_five_steps(backend: type, rule: str) -> None:
    serving = machine(backend)
    with pytest.raises(AssertionError, match=rf"\[{rule}\]") as failure:
        run_state_machine_as_test(serving, settings=SETTINGS)
    # the last run is Hypothesis' replay of the shrunk example; the first invariant call precedes any rule
    assert serving.runs[-1] - 1 <= 5, failure.value


def test_the_torch_backend_stays_clean_under_the_machine() -> None:
    run_state_machine_as_test(machine(TorchBackend), settings=settings(SETTINGS, max_examples=15))
