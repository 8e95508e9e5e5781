"""A model job's own cancel flag and its done-callbacks (engine/inference/runtime.py)."""

import threading

from engine.inference.runtime import Job, ModelUnloaded


def test_a_callback_added_after_the_job_ended_still_runs_once():
    job = Job(lambda w, j: None, 0, None)
    job._finish(ModelUnloaded("dropped unrun"))
    seen = []
    job.add_done_callback(seen.append)  # the summary's submit-then-register race, lost before
    assert seen == [job] and isinstance(job.error, ModelUnloaded)


def test_callbacks_added_before_the_end_run_at_the_end():
    job = Job(lambda w, j: None, 0, None)
    seen = []
    job.add_done_callback(seen.append)
    assert seen == []
    job._finish()
    assert seen == [job] and job.error is None


def test_a_job_stops_on_its_own_flag_or_the_callers_event_but_never_sets_the_callers():
    caller = threading.Event()
    job = Job(lambda w, j: None, 0, caller)
    job.cancel.set()
    assert job.cancel.is_set() and not caller.is_set()
    other = Job(lambda w, j: None, 0, caller)
    assert not other.cancel.is_set()
    caller.set()
    assert other.cancel.is_set()
