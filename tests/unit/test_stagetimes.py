"""The engine's stage timing hooks (fuzz/engine/stagetimes.py): what is recorded, never how long it took
(a busy CI host makes any threshold flaky)."""

from __future__ import annotations

import pytest
from hypothesis import find, settings

from fuzz.engine.execute import run_example
from fuzz.engine.stagetimes import recording, stage
from fuzz.targets import lookup

# One agreeing example: two sides built and called; compared (the differential, then the sync rule) and
# judged by the target's oracles (invariants, reference, consumer), each block timed as it is asked.
RUN_EXAMPLE_STAGES = {"materialize": 2, "calls": 2, "compare": 2, "oracles": 3}


def _one_spec(name: str) -> tuple:
    (target,) = lookup([name])
    spec = find(target.input_model().specs(("cpu",), "caller"), lambda _: True, settings=settings(database=None))
    return target, spec


def test_a_stage_records_only_while_recording():
    with stage("outside"):
        pass
    with recording() as recorder:
        with stage("a"):
            pass
        with stage("a"):
            pass
    with stage("a"):  # after: the recorder is gone
        pass
    assert recorder.counts == {"a": 2}
    assert set(recorder.seconds) == {"a"} and recorder.seconds["a"] >= 0


def test_a_nested_stage_is_its_own_and_an_exception_still_records_and_propagates():
    synced = []
    with recording(sync=lambda: synced.append(1)) as recorder:
        with stage("outer"):
            with stage("inner"):
                pass
            with stage("unsynced", sync=False):
                pass
        with pytest.raises(ValueError, match="boom"):
            with stage("failing"):
                raise ValueError("boom")
        with stage("after"):  # the failed stage left nothing open
            pass
    assert recorder.counts == {"inner": 1, "unsynced": 1, "outer": 1, "failing": 1, "after": 1}
    assert all(seconds >= 0 for seconds in recorder.seconds.values())  # nested seconds are out of outer's
    assert len(synced) == 3  # inner, outer, after: not the unsynced one, not on the way out of an exception


def test_recorders_do_not_leak_between_nested_recordings():
    with recording() as outer:
        with recording() as inner:
            with stage("x"):
                pass
        with stage("y"):
            pass
    assert inner.counts == {"x": 1} and outer.counts == {"y": 1}


def test_one_cpu_example_of_run_example_records_the_stages_bench_reads():
    target, spec = _one_spec("fla-chunk-offsets")
    with recording() as recorder:
        run_example(target, spec)
    assert recorder.counts == RUN_EXAMPLE_STAGES
    assert set(recorder.seconds) == set(RUN_EXAMPLE_STAGES)


def test_a_target_with_a_consumer_records_its_reads_as_a_stage():
    target, spec = _one_spec("keye-process-image")
    with recording() as recorder:
        result = run_example(target, spec)
    assert result.legacy.ok and result.optimized.ok  # the consumer reads only an output that returned
    assert recorder.counts == {**RUN_EXAMPLE_STAGES, "consumer": 2}
