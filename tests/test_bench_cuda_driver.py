"""benchmarks/bench_cuda_driver.py: the order in which a training round's chunks run
(the GPU side itself runs only on a machine with a GPU, scripts/gpu_run.sh)."""
import pytest

from tests.conftest import load_benchmark


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
        wall, issued, collections = worker.ask("chunk")
        assert 0 < issued <= wall and collections >= 0
        path = tmp_path / "profile.txt"
        got = worker.ask(f"profile {path}")
        assert got["issue_ms"] > 0 and "aten::" in path.read_text()
    finally:
        worker.close()
    assert worker.proc.returncode == 0
