"""Thread calibration (engine/inference/thread_calibration.py) and the CPU facts it starts from
(engine/inference/cpu_facts.py): what is tried, what is picked, what is kept, and bad files."""

from __future__ import annotations

import json

from engine.inference.cpu_facts import CpuFacts, LoadMeter, _linux_cores
from engine.inference.thread_calibration import (BATCH_TOKENS, DECODE_STEPS, QUIET_CPUS, Calibration,
                                                 CalibrationStore, best_count, candidates, measure)


def test_candidates_climb_to_one_per_performance_core():
    assert candidates(CpuFacts(2, 2, 2, "x")) == ([1, 2], [1, 2])
    assert candidates(CpuFacts(16, 8, 8, "x")) == ([2, 4, 6, 8], [4, 8, 16])  # SMT: a batch tries them all
    assert candidates(CpuFacts(20, 14, 6, "hybrid")) == ([1, 3, 4, 6], [3, 6, 20])
    assert candidates(CpuFacts(1, 1, 1, "x")) == ([1], [1])


def test_the_most_threads_within_noise_of_the_fastest_win():
    assert best_count({1: 50.0, 2: 90.0}) == 2
    assert best_count({2: 30.0, 4: 31.0, 8: 30.5}) == 8  # within 3 %: keep every core, as before
    assert best_count({2: 30.0, 4: 40.0, 8: 33.0}) == 4  # decode bound by bandwidth: fewer is faster


class FakeMeter:
    def __init__(self, others=0.0):
        self.others = others

    def read(self):
        return self.others, 1.0


def test_measure_times_each_count_and_leaves_the_cache_empty():
    calls, kv, now = [], [], [0.0]

    def set_threads(d, b):
        calls.append(("threads", d, b))

    def step(ids):
        kv.extend(ids)
        n = calls[-1][1] if calls and calls[-1][0] == "threads" else 1
        now[0] += len(ids) * (0.01 / n)  # a fake model twice as fast on two threads
        calls.append(("step", len(ids)))

    cal = measure(set_threads, step, kv.clear, CpuFacts(2, 2, 2, "x"), FakeMeter(), clock=lambda: now[0])
    assert kv == []
    assert sorted(cal.decode) == [1, 2] and sorted(cal.batch) == [1, 2]
    assert (cal.best_decode, cal.best_batch) == (2, 2)
    steps = [c[1] for c in calls if c[0] == "step"]
    assert steps.count(1) == 2 * DECODE_STEPS and steps.count(BATCH_TOKENS) == 2


def test_a_calibration_is_kept_on_disk_and_read_back(tmp_path):
    path = tmp_path / "cal.json"
    cal = Calibration({1: 50.0, 2: 90.0}, {1: 100.0, 2: 180.0}, 0.1, 0.2)
    CalibrationStore().put(path, "m:1|cpu|2|0|v", cal)
    got = CalibrationStore().get(path, "m:1|cpu|2|0|v")  # a new process: read from the file
    assert got == cal and got.cached
    assert CalibrationStore().get(path, "other") is None
    assert "m:1|cpu|2|0|v" in json.loads(path.read_text())


def test_a_calibration_on_a_busy_machine_is_not_kept(tmp_path):
    path = tmp_path / "cal.json"
    store = CalibrationStore()
    store.put(path, "k", Calibration({1: 50.0}, {1: 100.0}, QUIET_CPUS + 0.5, 0.2))
    assert not path.exists() and store.get(path, "k") is None


def test_a_damaged_file_means_calibrating_again(tmp_path, caplog):
    path = tmp_path / "cal.json"
    for text in ("{not json", "[1, 2]", '{"k": {"decode": {"x": 1}}}', '{"k": {"decode": {}, "batch": {}}}'):
        path.write_text(text)
        assert CalibrationStore().get(path, "k") is None
    path.write_text("{not json")
    CalibrationStore().put(path, "k", Calibration({1: 5.0}, {1: 9.0}))  # replaces the damaged file
    assert CalibrationStore().get(path, "k").decode == {1: 5.0}


def _cpu(root, n, package, core):
    topo = root / f"cpu{n}" / "topology"
    topo.mkdir(parents=True)
    (topo / "physical_package_id").write_text(f"{package}\n")
    (topo / "core_id").write_text(f"{core}\n")


def test_physical_and_performance_cores_from_sysfs(tmp_path):
    root = tmp_path / "devices" / "system" / "cpu"
    for n in range(8):  # 4 cores with two threads each (siblings n and n+4)
        _cpu(root, n, 0, n % 4)
    assert _linux_cores(list(range(8)), root) == (4, 4)
    assert _linux_cores([0, 4], root) == (1, 1)  # an affinity mask of one core's two threads
    (tmp_path / "devices" / "cpu_core").mkdir(parents=True)
    (tmp_path / "devices" / "cpu_core" / "cpus").write_text("0-1,4-5\n")  # hybrid: cores 0 and 1 are P-cores
    assert _linux_cores(list(range(8)), root) == (4, 2)
    assert _linux_cores([9], root) is None  # not in sysfs: psutil's count instead


def test_the_load_meter_subtracts_our_own_cpu_time():
    now, times = [0.0], [(0.0, 0.0)]
    meter = LoadMeter(cpus=[0, 1], clock=lambda: now[0], times=lambda: times[0])
    now[0], times[0] = 2.0, (3.0, 1.0)  # 3 CPU-seconds busy in 2 s, one of them ours
    assert meter.read() == (1.0, 2.0)
    now[0], times[0] = 3.0, (3.5, 1.5)  # all of it ours
    assert meter.read() == (0.0, 1.0)
    now[0], times[0] = 4.0, (10.0, 1.5)  # more than the CPUs watched: clamped
    assert meter.read() == (2.0, 1.0)
