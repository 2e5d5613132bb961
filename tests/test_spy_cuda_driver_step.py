"""benchmarks/spy_cuda_driver_step.py: py-spy's collapsed stacks read into busy thread
time per frame and step, and the two sides compared frame by frame."""
import pytest

from tests.conftest import load_benchmark


def _spy():
    return load_benchmark("spy_cuda_driver_step")


def _stacks(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(f"{';'.join(frames)} {n}\n" for frames, n in lines))
    return str(path)


def test_frames_count_busy_threads_inside_the_loop_only(tmp_path):
    spy = _spy()
    main = ["thread (101): MainThread", "0x7f00aa (libc.so.6)", "<module> (/x/spy_cuda_driver_step.py:166)"]
    loop = main + ["_sampled_steps (/x/spy_cuda_driver_step.py:60)", "step (/y/bench_cuda_driver.py:206)"]
    engine = ["thread (202)", "torch::autograd::Engine::thread_main (libtorch_cpu.so)"]
    path = _stacks(tmp_path, "s.txt", [
        (loop + ["at::_ops::mm::call (libtorch_cpu.so)"], 30),
        (loop + ["gc_collect_main (libpython3.11.so)"], 10),
        (main + ["_find_and_load (<frozen importlib._bootstrap>:1176)"], 500),     # imports: not the loop
        (main[:2] + ["cuDevicePrimaryCtxRelease (libcuda.so.1)"], 300),          # shutdown: no Python frame
        (engine + ["at::_ops::mm::call (libtorch_cpu.so)"], 20),                   # the backward's thread
        (engine + ["torch::autograd::ReadyQueue::pop (libtorch_cpu.so)", "pthread_cond_wait (libc.so.6)"], 900),
        (loop + ["cudaStreamSynchronize (libcudart.so)", "__futex_abstimed_wait (libc.so.6)"], 40),  # waiting
    ])
    frames, total = spy.frames_per_step(path, steps=2)
    per_sample = 1 / spy.RATE / 2
    assert total == pytest.approx(60 * per_sample)
    assert frames["at::_ops::mm::call (libtorch_cpu.so)"] == pytest.approx(50 * per_sample)
    assert frames["gc_collect_main (libpython3.11.so)"] == pytest.approx(10 * per_sample)
    # ids, addresses, folders and line numbers do not split a frame between runs
    assert frames["thread: MainThread"] == pytest.approx(40 * per_sample)
    assert frames["? (libc.so.6)"] == pytest.approx(40 * per_sample)
    assert frames["step (bench_cuda_driver.py)"] == pytest.approx(40 * per_sample)
    assert not any("importlib" in k or "ReadyQueue" in k or "Synchronize" in k or "Ctx" in k for k in frames)


def test_compare_orders_frames_by_difference():
    spy = _spy()
    sides = {"musa": {"frames": {"a": 2e-3, "b": 1e-3, "same": 5e-3, "only_musa": 0.3e-3}},
             "cuda": {"frames": {"a": 1e-3, "b": 1.5e-3, "same": 5e-3}}}
    rows = spy.compare(sides, ["musa", "cuda"])
    assert [r["frame"] for r in rows] == ["a", "b", "only_musa"]
    assert rows[0]["diff_ms"] == pytest.approx(1.0) and rows[1]["diff_ms"] == pytest.approx(-0.5)
    assert rows[2]["cuda_ms"] == 0.0
