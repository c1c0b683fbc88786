"""A sweep step whose client timing was unreliable is measured again with more client processes
(#20: a remainder share read where the client was late is never a verdict; a better measurement
is), or a note says why it could not be."""

from __future__ import annotations

from types import SimpleNamespace

from latscope.reliability import ClientReliability
from latscope.analysis.sweep import Step
from latscope.campaign.stages import remeasure_unreliable
from latscope.campaign.state import DiagnoseOptions, Diagnosis
from summaries import bench_summary  # tests/


def _obs(reliable: bool, workers: int = 1) -> SimpleNamespace:
    client = ClientReliability(reliable, "" if reliable else "event-loop lag p99 436.0 ms")
    return SimpleNamespace(client=client,
                           summary=bench_summary(load={"mode": "closed", "workers_chosen": {
                               "count": workers, "why": "test"}}))


def _state(tmp_path, reliable_at: dict[float, bool]) -> Diagnosis:
    state = Diagnosis(DiagnoseOptions(), run=None, progress=lambda line: None)
    for i, (load, ok) in enumerate(reliable_at.items()):
        state.steps.append(Step(load, {}, run_dir=str(tmp_path / f"step-{i:02d}")))
        state.observations[load] = _obs(ok)
    loads = sorted(reliable_at)
    state.levels = {"light": loads[0], "knee": loads[1], "top": loads[-1]}
    return state


def _measurer(state: Diagnosis, calls: list, reliable_after: bool):
    def measure(load: float, workers: int) -> Step:
        calls.append((load, workers))
        step = Step(load, {}, run_dir=f"again-c{load:g}", phase="remeasure")
        state.steps.append(step)
        state.observations[load] = _obs(reliable_after, workers)
        return step
    return measure


def _remeasure(tmp_path, reliable: dict, reliable_after: bool, spare_cores: int):
    """A diagnosis whose steps were (un)reliable as given, re-measured with time to spare:
    (state, the measurer's calls, the loads measured again)."""
    state = _state(tmp_path, reliable)
    calls: list = []
    again = remeasure_unreliable(state, _measurer(state, calls, reliable_after),
                                 fits=lambda load: True, spare_cores=spare_cores)
    return state, calls, again


def test_an_unreliable_knee_is_measured_again_with_more_processes(tmp_path):
    state, calls, again = _remeasure(tmp_path, {1.0: True, 8.0: False, 16.0: True}, True, 6)
    assert again == [8.0] and calls == [(8.0, 2)]
    # one step per load: the first measurement's step is replaced, its directory named
    assert [(s.load, s.run_dir) for s in state.steps] == [
        (1.0, str(tmp_path / "step-00")), (8.0, "again-c8"), (16.0, str(tmp_path / "step-02"))]
    note = state.notes[-1]
    assert "c=8 measured again with 2 client processes" in note and "now reliable" in note
    assert str(tmp_path / "step-01") in note


def test_no_spare_core_or_no_time_leaves_the_step_and_says_why(tmp_path):
    state = _state(tmp_path, {1.0: True, 8.0: False, 16.0: False})
    calls: list = []
    assert remeasure_unreliable(state, _measurer(state, calls, True), fits=lambda load: True,
                                spare_cores=1) == []
    assert calls == [] and len(state.steps) == 3
    assert all("no spare core" in n for n in state.notes) and len(state.notes) == 2
    state.notes.clear()
    assert remeasure_unreliable(state, _measurer(state, calls, True), fits=lambda load: False,
                                spare_cores=8) == []
    assert calls == [] and "budget left no time" in state.notes[0]


def test_reliable_steps_are_not_measured_again_and_a_still_late_client_is_said(tmp_path):
    state, calls, again = _remeasure(tmp_path, {1.0: False, 8.0: True, 16.0: True}, False, 3)
    assert again == [1.0] and calls == [(1.0, 2)]
    assert "still unreliable" in state.notes[-1]
