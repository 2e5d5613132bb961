"""benchmarks/bench_cuda_driver.py: the order in which a training round's chunks run
(the GPU side itself runs only on a machine with a GPU, scripts/gpu_run.sh)."""
import dataclasses
import json
import math
import statistics

import pytest

from tests.conftest import load_benchmark
from torch_musa._driver import KERNEL_DEVICE


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_cuda_driver")


@pytest.mark.parametrize("chunks", [1, 2, 4, 8])
def test_each_round_gives_both_sides_the_same_chunks_in_alternating_pairs(bench, chunks):
    for i in range(4):
        order = bench.chunk_order(i, chunks)
        assert order.count("musa") == order.count("cuda") == chunks
        pairs = [order[j:j + 2] for j in range(0, len(order), 2)]
        assert all(sorted(p) == ["cuda", "musa"] for p in pairs)
        # The first side alternates pair by pair and round by round.
        assert [p[0] for p in pairs] == [("musa", "cuda")[(i + j) % 2] for j in range(chunks)]


def test_training_cases_split_into_whole_chunks(bench):
    for case, cfg in bench.TRAIN_CASES.items():
        assert cfg["steps"] % cfg["chunk"] == 0, case
        assert cfg["steps"] // cfg["chunk"] >= 2, case  # a round interleaves the sides


def test_a_training_worker_answers_warmup_chunk_and_profile(bench, tmp_path):
    # The host driver stands in for the GPU: the protocol is the same on both sides.
    worker = bench.Worker("musa", batch=1, seq=16, n_layer=1, steps=2, compiled=False)
    try:
        loss = worker.ask("warmup", float)
        assert 5.0 < loss < 20.0  # ~ln(50257) for a fresh model
        wall, issued, collections, usage = worker.ask("chunk")
        assert 0 < issued <= wall and collections >= 0
        # The worker's own CPU time per step: the main thread's, at most the wall time
        # (plus the clock's grain), and the other threads' beside it.
        assert 0 < usage["main_cpu_ms"] <= wall * 1e3 + 5
        assert usage["other_threads_cpu_ms"] >= 0 and usage["involuntary_switches"] >= 0
        assert usage["page_faults"] >= 0 and usage["voluntary_switches"] >= 0
        assert usage["threads"] >= 1 and usage["cpu"] >= 0
        # Autograd's device threads are told apart by name. The host driver runs musa's
        # backward on the caller's thread (_runtime.py), leaving them idle, and waits for
        # the device there too; the cuda driver's backward runs on them, as native's.
        if KERNEL_DEVICE == "cpu":
            assert 0 <= usage["autograd_cpu_ms"] < 0.1 * usage["main_cpu_ms"]
            assert usage["device_wait_cpu_ms"] == 0
        else:
            assert 0 < usage["autograd_cpu_ms"] <= usage["other_threads_cpu_ms"] + 1
        path = tmp_path / "profile.txt"
        got = worker.ask(f"profile {path}")
        assert got["issue_ms"] > 0 and "aten::" in path.read_text()
    finally:
        worker.close()
    assert worker.proc.returncode == 0


def test_paired_chunk_ratios_compare_chunks_that_ran_side_by_side(bench):
    # Round 2 ran on a host twice as slow for both sides: the pairs' ratios do not see it.
    walls = [{"musa": [1.1, 1.1], "cuda": [1.0, 1.0]}, {"musa": [2.2, 2.4], "cuda": [2.0, 2.0]}]
    got = bench.paired_chunk_ratios(walls)
    assert got["pairs"] == 4
    assert got["pair_ratio_median"] == pytest.approx(1.1)
    assert got["pair_ratio_q1"] == pytest.approx(1.1) and got["pair_ratio_q3"] > 1.1


def test_pair_intervals_say_how_finely_a_run_can_judge_a_ratio(bench, tmp_path):
    import random

    steady = [{"musa": [1.05, 2.1], "cuda": [1.0, 2.0]}] * 3
    got = bench.pair_ratio_intervals(steady)
    assert got["pair_log_sd"] == pytest.approx(0.0, abs=1e-12)
    assert got["pair_ratio_gmean"] == pytest.approx(1.05)
    assert got["pair_ratio_ci95"] == pytest.approx([1.05, 1.05])
    assert all(r == pytest.approx([1.05, 1.05]) for r in got["round_ci95"]) and len(got["round_ci95"]) == 3
    # A noisy host: each pair's log ratio off by 0.1 (the lent hosts' ~0.11), musa 8 % slower,
    # one round on a host twice as slow for both sides (pairs cancel it).
    rng = random.Random(7)
    walls = []
    for i in range(7):
        slow = 2.0 if i == 3 else 1.0
        cuda = [slow * rng.uniform(0.8, 1.2) for _ in range(8)]
        walls.append({"musa": [c * 1.08 * math.exp(rng.gauss(0, 0.1)) for c in cuda], "cuda": cuda})
    got = bench.pair_ratio_intervals(walls)
    assert 0.07 < got["pair_log_sd"] < 0.13
    lo, hi = got["pair_ratio_ci95"]
    assert lo < 1.08 < hi and hi / lo < 1.08  # 56 pairs: within a few per cent
    for (rlo, rhi), r in zip(got["round_ci95"], walls):  # 8 pairs: about +-7 % each
        assert 1.10 < rhi / rlo < 1.20
        assert rlo < math.exp(statistics.fmean(math.log(m / c) for m, c in zip(r["musa"], r["cuda"]))) < rhi
    assert 25 < got["pairs_per_round_for_3pct"] < 80
    rlo, rhi = got["rounds_gmean_ci95"]  # seven rounds' means: wider than 56 pairs', still around 1.08
    assert rlo < 1.08 < rhi and rhi / rlo > 1.0
    times = {"musa": [1.0], "cuda": [1.0]}
    row = bench.summarise("GPT-2 small step b4x256 bf16", "host_bound", times, times)
    row.update(bench.paired_chunk_ratios(walls), cpus=None)
    machine = {"gpu": "test GPU", "torch": "x", "cuda": "y", "python": "3", "cpu_count": 2}
    bench.write(str(tmp_path), {"machine": machine, "rounds": 7, "train_rounds": 7, "rows": [row]})
    table = (tmp_path / "cuda_driver.md").read_text()
    line = next(ln for ln in table.splitlines() if ln.startswith("| GPT-2") and f"{row['pair_log_sd']:.3f}" in ln)
    assert f"| no | {row['pair_log_sd']:.3f} | {got['pair_ratio_gmean']:.3f} ({lo:.3f}–{hi:.3f}) | {rlo:.3f}–{rhi:.3f} |" in line
    assert line.endswith(f"| {got['pairs_per_round_for_3pct']} |")


def test_worker_cpus_parses_lists_and_leaves_small_machines_unpinned(bench, monkeypatch):
    assert bench.worker_cpus("all") is None
    assert bench.worker_cpus("12-15") == [{12, 13, 14, 15}]
    assert bench.worker_cpus("3,5-6") == [{3, 5, 6}]
    monkeypatch.setattr(bench.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert bench.worker_cpus("auto") == [{12, 13, 14, 15}]
    assert bench.worker_cpus("rotate") == [set(range(i, i + 4)) for i in (0, 4, 8, 12)]
    monkeypatch.setattr(bench.os, "sched_getaffinity", lambda pid: {0, 1})
    assert bench.worker_cpus("auto") is None and bench.worker_cpus("rotate") is None


def test_a_pinned_worker_runs_every_thread_on_the_cpus_it_was_given(bench):
    import os

    cpu = max(os.sched_getaffinity(0))
    worker = bench.Worker("musa", batch=1, seq=16, n_layer=1, steps=2, compiled=False)
    try:
        worker.ask("warmup", float)
        assert worker.ask(f"pin {cpu}") == [cpu]
        tasks = os.listdir(f"/proc/{worker.proc.pid}/task")
        assert len(tasks) > 1  # the stream's and the intra-op pool's threads too
        assert all(os.sched_getaffinity(int(t)) == {cpu} for t in tasks)
        worker.ask("chunk")  # still answers
    finally:
        worker.close()
    assert worker.proc.returncode == 0


def test_the_report_lists_each_training_rounds_ratio(bench, tmp_path):
    times = {"musa": [1.05, 1.2, 1.0], "cuda": [1.0, 1.0, 1.0]}
    row = bench.summarise("GPT-2 small step b4x256 bf16", "host_bound", times, times)
    row.update(bench.paired_chunk_ratios([{"musa": [1.05], "cuda": [1.0]}]), cpus=None)
    op = bench.summarise("add 64x64", "small", {"musa": [1.1], "cuda": [1.0]})
    machine = {"gpu": "test GPU", "torch": "x", "cuda": "y", "python": "3", "cpu_count": 2}
    bench.write(str(tmp_path), {"machine": machine, "rounds": 3, "train_rounds": 3, "rows": [op, row]})
    table = (tmp_path / "cuda_driver.md").read_text()
    assert "| GPT-2 small step b4x256 bf16 | 1.050, 1.200, 1.000 |" in table
    assert "| add 64x64 | 1.100 |" not in table  # ops have no per-round target
    assert row["ok"] is False  # one round over 1.10 fails the row


def test_each_sides_process_usage_is_summarised_and_tabled(bench, tmp_path):
    def usage(main, other, cpu):
        return {"main_cpu_ms": main, "other_threads_cpu_ms": other, "involuntary_switches": 0.5,
                "voluntary_switches": 2.0, "page_faults": main * 10, "threads": 9, "cpu": cpu}
    rounds = [{"musa": [usage(5.0, 0.1, 3), usage(7.0, 2.0, 4)], "cuda": [usage(4.0, 0.0, 3)]},
              {"musa": [usage(6.0, 0.2, 3)], "cuda": [usage(4.2, 0.0, 5)]}]
    got = bench.process_summary(rounds)
    assert got["musa"]["main_cpu_ms"] == 6.0 and got["musa"]["other_threads_cpu_ms"] == 0.2
    assert got["musa"]["cpus"] == [3, 4] and got["cuda"]["cpus"] == [3, 5]
    assert got["musa"]["page_faults"] == 60.0 and got["cuda"]["page_faults"] == 41.0
    times = {"musa": [1.0], "cuda": [1.0]}
    row = bench.summarise("GPT-2 small step b4x256 bf16", "host_bound", times, times)
    row.update(bench.paired_chunk_ratios([{"musa": [1.0], "cuda": [1.0]}]), cpus=None, process=got)
    machine = {"gpu": "test GPU", "torch": "x", "cuda": "y", "python": "3", "cpu_count": 2}
    bench.write(str(tmp_path), {"machine": machine, "rounds": 1, "train_rounds": 1, "rows": [row]})
    table = (tmp_path / "cuda_driver.md").read_text()
    assert "| GPT-2 small step b4x256 bf16 | musa | 6.00 | 0.20 | 0.00 | 0.00 | 0.50 | 2.00 | 60.0 | 9 | 3, 4 |" in table


def test_named_threads_cpu_time_is_counted_per_group_and_new_threads_from_zero(bench):
    before = {"process_s": 1.0, "main_s": 0.5, "switches": 0, "waits": 0, "faults": 0, "threads": 3, "cpu": 0,
              "named_threads": {"11": ("autograd", 2.0)}}
    after = dict(before, process_s=1.4, main_s=0.6,
                 named_threads={"11": ("autograd", 2.2), "12": ("device_wait", 0.08)})
    got = bench.usage_per_step(before, after, steps=4)
    assert got["autograd_cpu_ms"] == pytest.approx(50.0) and got["device_wait_cpu_ms"] == pytest.approx(20.0)
    assert got["other_threads_cpu_ms"] == pytest.approx(75.0)


def test_the_results_are_written_after_every_training_case(bench, tmp_path, monkeypatch):
    # A lent machine taken back mid-run still leaves the cases that finished.
    import torch_musa.config as config

    monkeypatch.setattr(config, "CONFIG", dataclasses.replace(config.CONFIG, driver="cuda"))
    machine = {"gpu": "test GPU", "torch": "x", "cuda": "y", "python": "3", "cpu_count": 2}
    monkeypatch.setattr(bench, "machine", lambda: machine)
    done = []

    def case(rounds, steps, name, profile_dir, compiled, cpus, control=False, fresh_workers=False):
        if done:
            raise KeyboardInterrupt  # the machine goes away during the second case
        done.append(name)
        times = {"musa": [1.0], "cuda": [1.0]}
        row = bench.summarise(f"step {name}", "host_bound", times, times)
        row.update(bench.paired_chunk_ratios([{"musa": [1.0], "cuda": [1.0]}]), cpus=None)
        return row

    monkeypatch.setattr(bench, "bench_gpt2", case)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--out", str(tmp_path), "--skip-ops", "--train", "eager",
                    "--cases", "gpt2-2layer-b4x256,gpt2-b4x256"])
    rows = json.loads((tmp_path / "cuda_driver.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["step gpt2-2layer-b4x256"]


def test_quiet_chunks_see_through_a_host_that_slows_one_side(bench, tmp_path):
    # Ten chunks a side; a quarter of musa's ran on a core slowed 2.5x (CPU time with it),
    # which the median of any round can land on; the tenth percentiles cannot.
    def usage(ms):
        return {"main_cpu_ms": ms * 0.6, "other_threads_cpu_ms": ms * 0.4}
    musa = [1.05 + 0.01 * i for i in range(10)]
    cuda = [1.00 + 0.01 * i for i in range(10)]
    for i in (1, 4, 7):
        musa[i] *= 2.5
    walls = [{"musa": musa[:5], "cuda": cuda[:5]}, {"musa": musa[5:], "cuda": cuda[5:]}]
    usage_rounds = [{side: [usage(w) for w in r[side]] for side in r} for r in walls]
    got = bench.quiet_chunk_ratios(walls, usage_rounds)
    assert 1.04 < got["quiet_ratio"] < 1.06 and 1.04 < got["quiet_cpu_ratio"] < 1.06
    assert got["cpu_spread"]["musa"] > 2.4 and got["cpu_spread"]["cuda"] < 1.1
    # Two chunks a side: the tenth percentile lies between them, never below the faster.
    few = bench.quiet_chunk_ratios([{"musa": [1.0, 2.0], "cuda": [1.0, 4.0]}],
                                   [{"musa": [usage(1.0), usage(2.0)], "cuda": [usage(1.0), usage(4.0)]}])
    assert few["quiet_ratio"] == pytest.approx(1.1 / 1.3)
    # The paired chunks meet the slowed ones.
    assert bench.paired_chunk_ratios(walls)["pair_ratio_q3"] > 1.5
    times = {"musa": [sum(musa) / 10], "cuda": [sum(cuda) / 10]}
    row = bench.summarise("GPT-2 small step b4x256 bf16", "host_bound", times, times)
    row.update(bench.paired_chunk_ratios(walls), cpus=None)
    row.update(got)
    machine = {"gpu": "test GPU", "torch": "x", "cuda": "y", "python": "3", "cpu_count": 2}
    bench.write(str(tmp_path), {"machine": machine, "rounds": 1, "train_rounds": 1, "rows": [row]})
    table = (tmp_path / "cuda_driver.md").read_text()
    assert f"| {got['quiet_ratio']:.3f} ({got['quiet_cpu_ratio']:.3f}) | ≤ 1.1 | MISS |" in table


def test_the_control_runs_native_cuda_in_musas_place_and_says_so(bench, monkeypatch):
    # The control's rounds spread only as the host makes them: both slots run the same
    # native worker, interleaved as a real comparison is.
    started, chunks = [], []

    class FakeWorker:
        def __init__(self, device, batch, seq, n_layer, steps, compiled):
            started.append(device)

        def ask(self, cmd, parse=None):
            if cmd == "warmup":
                return 10.0
            chunks.append(cmd)  # every third chunk of either side runs on a slowed host
            wall = 0.010 * (1.2 if len(chunks) % 3 == 0 else 1.0)
            usage = {"main_cpu_ms": 6.0, "other_threads_cpu_ms": 3.0, "involuntary_switches": 0.0,
                     "voluntary_switches": 1.0, "page_faults": 0.0, "threads": 4, "cpu": 1}
            return [wall, wall * 0.8, 0, usage]

        def close(self):
            pass

    monkeypatch.setattr(bench, "Worker", FakeWorker)
    row = bench.bench_gpt2(3, None, "gpt2-2layer-b4x256", control=True)
    assert started == ["cuda", "cuda"]
    assert row["control"] is True and row["name"].startswith("control, cuda in musa's place: ")
    # The slowed chunks fall unevenly on the two slots: the rounds spread, and say so.
    assert len(row["round_ratios"]) == 3 and row["ratio_max"] > 1.0
    started.clear()
    assert bench.bench_gpt2(3, None, "gpt2-2layer-b4x256")["control"] is False
    assert started == ["musa", "cuda"]


def idle_chunk():
    """A fake worker's answer to "chunk": 10 ms of wall time, its usage per step."""
    usage = {"main_cpu_ms": 1.0, "other_threads_cpu_ms": 1.0, "involuntary_switches": 0.0,
             "voluntary_switches": 0.0, "page_faults": 0.0, "threads": 2, "cpu": 0}
    return [0.01, 0.008, 0, usage]


def test_rotating_cpus_put_each_pair_of_chunks_on_one_group(bench, monkeypatch):
    # Both sides move together: a pair's two chunks run on the same cores, so where a
    # process happens to sit cannot favour one side (run 21's control).
    log = []

    class FakeWorker:
        def __init__(self, device, *args):
            self.name = f"w{len(log)}"
            log.append(("start", self.name))
            self.cpus = None

        def ask(self, cmd, parse=None):
            if cmd == "warmup":
                return 10.0
            if cmd.startswith("pin "):
                self.cpus = cmd[4:]
                return sorted(int(c) for c in self.cpus.split(","))
            log.append((self.name, self.cpus))
            return idle_chunk()

        def close(self):
            pass

    monkeypatch.setattr(bench, "Worker", FakeWorker)
    groups = [{0, 1}, {2, 3}, {4, 5}]
    row = bench.bench_gpt2(2, 16, "gpt2-b4x256", cpus=groups)  # 4 chunks of 4 a side per round
    chunks = [entry for entry in log if entry[0] != "start"][2:]  # after the untimed chunk each
    assert len(chunks) == 16
    for j in range(0, 16, 2):  # each pair: both workers, one group, the groups in turn
        assert {chunks[j][0], chunks[j + 1][0]} == {"w0", "w1"}
        assert chunks[j][1] == chunks[j + 1][1] == ",".join(map(str, sorted(groups[(j // 2) % 3])))
    assert row["cpu_groups"] == [[0, 1], [2, 3], [4, 5]] and row["cpus"] == [0, 1, 2, 3, 4, 5]


def test_fresh_workers_give_every_round_a_new_warm_pair(bench, monkeypatch):
    # Two processes of the same step differ by 3-8 % for a whole run (runs 21-22): with
    # --fresh-workers each round's chunks come from a pair started, warmed and pinned for it.
    log = []

    class FakeWorker:
        def __init__(self, device, *args):
            self.name = f"{device}{sum(1 for e in log if e[0] == 'start')}"
            log.append(("start", self.name))

        def ask(self, cmd, parse=None):
            log.append((cmd.split(" ")[0], self.name))
            if cmd == "warmup":
                return 10.0
            if cmd.startswith("pin "):
                return [0, 1]
            return idle_chunk()

        def close(self):
            log.append(("close", self.name))

    monkeypatch.setattr(bench, "Worker", FakeWorker)
    row = bench.bench_gpt2(3, 64, "gpt2-2layer-b4x256", cpus=[{0, 1}], fresh_workers=True)
    assert row["fresh_workers"] is True and len(row["round_ratios"]) == 3
    starts = [i for i, e in enumerate(log) if e[0] == "start"]
    assert len(starts) == 6  # a pair per round
    for r in range(3):
        names = {log[starts[2 * r]][1], log[starts[2 * r + 1]][1]}
        end = starts[2 * r + 2] if r < 2 else len(log)
        span = log[starts[2 * r]:end]
        # each new worker: three warm-up steps, pinned, one untimed chunk, then the round's chunks
        for name in names:
            cmds = [c for c, n in span if n == name and c != "start"]
            assert cmds[:5] == ["warmup"] * 3 + ["pin", "chunk"] and cmds[-1] == "close"
            assert cmds.count("chunk") == 1 + 8  # the untimed one and the round's 8 (64 steps of 8)
        assert all(n in names for c, n in span)  # no other pair's worker asked in this round
    log.clear()
    bench.bench_gpt2(3, 64, "gpt2-2layer-b4x256")
    assert sum(1 for e in log if e[0] == "start") == 2  # by default one pair for the whole case
