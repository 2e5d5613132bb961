"""torch.musa.tunable against torch.cuda.tunable: the same names and signatures, defaults,
argument checks, environment variables, filename rules and results-file format. The host
driver has one kernel per GEMM, so it tunes nothing; what a file holds is what it reports."""
from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.config import CONFIG
from torch_musa.core import tunable as mt

# Under the cuda driver these functions are torch.cuda.tunable's, whose state is the
# process's TunableOp (enabling it would tune every later GEMM of the run): the tests of
# musa's own state run on the host driver only. On the H200 (torch 2.11) the defaults,
# argument checks and filename tests passed against torch.cuda.tunable itself.
HOST = pytest.mark.skipif(CONFIG.driver == "cuda", reason="changes the process's TunableOp "
                          "(torch.cuda.tunable's under the cuda driver)")

PT = torch.__version__.split("+")[0]
# What a CUDA run writes (validators first, then op,params,solution,time); PT_VERSION ours.
CUDA_FILE = (f"Validator,PT_VERSION,{PT}\n"
             "Validator,CUBLASLT_VERSION,130000\n"
             "Validator,CUDA_DEVICE,9.0:NVIDIA H200\n"
             "GemmTunableOp_float_NT,nt_25088_4096_64_ld_64_64_25088,Gemm_Cublaslt_1219,1.262\n"
             "GemmTunableOp_float_NT,nt_4096_4096_64_ld_64_64_4096,Default,0.033\n"
             "GemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8,Default\n")


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test starts from a new process's TunableOp state and no TunableOp variables."""
    monkeypatch.setattr(mt, "_ctx", mt._Context())
    _set_env(monkeypatch)


def _set_env(monkeypatch, **values):
    """PYTORCH_TUNABLEOP_<name>=value as the configuration read them at import."""
    env = {f"PYTORCH_TUNABLEOP_{k}": v for k, v in values.items()}
    monkeypatch.setattr(mt, "CONFIG", dataclasses.replace(mt.CONFIG, pytorch_env=env))


def test_same_names_and_signatures_as_torch_cuda_tunable():
    assert torch.musa.tunable is mt
    for name in torch.cuda.tunable.__all__:
        ours, theirs = getattr(mt, name), getattr(torch.cuda.tunable, name)
        assert [(p.name, p.default) for p in inspect.signature(ours).parameters.values()] == \
            [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()], name


@HOST
def test_defaults_are_tuningcontexts():
    assert mt.is_enabled() is False
    assert mt.tuning_is_enabled() is True
    assert mt.record_untuned_is_enabled() is False
    assert mt.get_max_tuning_duration() == 30
    assert mt.get_max_tuning_iterations() == 100
    assert mt.get_filename() == ""  # until set or first read
    # A negative (default) rotating buffer is the device's L2 cache, in bytes.
    assert mt.get_rotating_buffer_size() == torch.musa.get_device_properties(0).L2_cache_size > 0


@HOST
def test_switches_and_argument_checks():
    mt.enable(True)
    mt.tuning_enable(False)
    mt.record_untuned_enable()
    assert (mt.is_enabled(), mt.tuning_is_enabled(), mt.record_untuned_is_enabled()) == (True, False, True)
    with pytest.raises(RuntimeError, match="expects a bool, but got int"):
        mt.enable(1)
    with pytest.raises(RuntimeError, match="expects an int, but got bool"):
        mt.set_max_tuning_duration(True)
    with pytest.raises(RuntimeError, match="expects an int, but got float"):
        mt.set_max_tuning_iterations(1.5)
    with pytest.raises(RuntimeError, match="expects a string, but got int"):
        mt.set_filename(3)
    with pytest.raises(RuntimeError, match="must be positive"):
        mt.set_numerical_check_tolerances(True, atol=0.0)
    mt.set_max_tuning_duration(-5)  # negative counts as 0, as SetMaxTuningDurationMs
    mt.set_max_tuning_iterations(7)
    assert (mt.get_max_tuning_duration(), mt.get_max_tuning_iterations()) == (0, 7)
    mt.set_rotating_buffer_size(2)  # MB in, bytes out
    assert mt.get_rotating_buffer_size() == 2 * 1024 * 1024
    mt.set_rotating_buffer_size(0)
    assert mt.get_rotating_buffer_size() == 0


@HOST
def test_environment_takes_precedence(monkeypatch):
    _set_env(monkeypatch, ENABLED="1", TUNING="0", MAX_TUNING_ITERATIONS="-3", ROTATING_BUFFER_SIZE="4")
    mt.enable(False)
    mt.tuning_enable(True)
    mt.set_max_tuning_iterations(50)
    assert mt.is_enabled() is True and mt.tuning_is_enabled() is False
    assert mt.get_max_tuning_iterations() == 0
    assert mt.get_rotating_buffer_size() == 4 * 1024 * 1024


@HOST
def test_filename_device_ordinal():
    dev = torch.musa.current_device()
    mt.set_filename("results_%d_run.csv", True)
    assert mt.get_filename() == f"results_{dev}_run.csv"
    mt.set_filename("a.b/results.csv", True)
    assert mt.get_filename() == f"a.b/results{dev}.csv"
    mt.set_filename("results", True)
    assert mt.get_filename() == f"results{dev}"
    mt.set_filename("results_%d.csv")  # without the flag the name stays as given
    assert mt.get_filename() == "results_%d.csv"


@HOST
def test_reads_a_file_cuda_wrote(tmp_path):
    f = tmp_path / "cuda.csv"
    f.write_text(CUDA_FILE)
    with pytest.warns(UserWarning, match="CUBLASLT_VERSION"):
        assert mt.read_file(str(f)) is True
    assert sorted(mt.get_results()) == sorted([
        ("GemmTunableOp_float_NT", "nt_25088_4096_64_ld_64_64_25088", "Gemm_Cublaslt_1219", 1.262),
        ("GemmTunableOp_float_NT", "nt_4096_4096_64_ld_64_64_4096", "Default", 0.033),
        ("GemmTunableOp_Half_TN", "tn_8_8_8_ld_8_8_8", "Default", 0.0),  # the time is optional
    ])


@HOST
def test_rejects_another_pytorchs_file(tmp_path):
    f = tmp_path / "old.csv"
    f.write_text(CUDA_FILE.replace(f"PT_VERSION,{PT}", "PT_VERSION,2.2.0"))
    with pytest.warns(UserWarning, match="PT_VERSION"):
        assert mt.read_file(str(f)) is False
    assert mt.read_file(str(tmp_path / "missing.csv")) is False
    assert mt.get_results() == ()


@HOST
def test_write_then_read_round_trip(tmp_path):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(CUDA_FILE)
    with pytest.warns(UserWarning):
        mt.read_file(str(src))
    assert mt.write_file(str(out)) is True
    lines = out.read_text().splitlines()
    assert lines[:2] == [f"Validator,{k},{v}" for k, v in mt.get_validators()]
    assert dict(mt.get_validators())["PT_VERSION"] == PT
    assert len(lines) == 2 + 3
    before = sorted(mt.get_results())
    mt._ctx = mt._Context()  # a new process reads what this one wrote
    assert mt.read_file(str(out)) is True
    assert sorted(mt.get_results()) == before


@HOST
def test_first_use_reads_the_default_file(tmp_path, monkeypatch):
    """As TunableOp's first use: the name defaults to PYTORCH_TUNABLEOP_FILENAME (or
    tunableop_results.csv) with the device ordinal inserted, and that file is read."""
    _set_env(monkeypatch, FILENAME=str(tmp_path / "r%d.csv"))
    (tmp_path / f"r{torch.musa.current_device()}.csv").write_text(
        f"Validator,PT_VERSION,{PT}\nGemmTunableOp_float_NN,nn_2_2_2,Default,0.5\n")
    assert mt.get_results() == (("GemmTunableOp_float_NN", "nn_2_2_2", "Default", 0.5),)
    assert mt.get_filename() == str(tmp_path / f"r{torch.musa.current_device()}.csv")


@HOST
def test_tuning_records_nothing_on_the_host(tmp_path):
    untuned = tmp_path / "untuned0.csv"
    untuned.write_text("GemmTunableOp_float_NT,nt_8_8_8_ld_8_8_8\n")
    with pytest.raises(AssertionError, match="TunableOp is not enabled"):
        mt.tune_gemm_in_file(str(untuned))
    mt.enable(True)
    mt.tuning_enable(False)
    with pytest.raises(AssertionError, match="Tuning is not enabled"):
        mt.tune_gemm_in_file(str(untuned))
    mt.tuning_enable(True)
    mt.set_filename(str(tmp_path / "results.csv"))
    mt.tune_gemm_in_file(str(untuned))
    assert mt.get_results() == ()
    with pytest.raises(AssertionError, match="num_gpus must be between 1 and"):
        mt.mgpu_tune_gemm_in_file(str(tmp_path / "untuned?.csv"), 0)


@HOST
def test_results_gather_matches_torch_cuda_tunable(tmp_path, monkeypatch):
    """mgpu_tune_gemm_in_file's merge of per-device results files gives what
    torch.cuda.tunable's own merge (run with its filename) gives."""
    monkeypatch.chdir(tmp_path)
    for i, extra in enumerate(("nn_1_1_1,Default,0.1", "nn_2_2_2,Default,0.2")):
        (tmp_path / f"res{i}.csv").write_text(
            f"Validator,PT_VERSION,{PT}\nGemmTunableOp_float_NN,nn_9_9_9,Default,0.9\n"
            f"GemmTunableOp_float_NN,{extra}\n")
    monkeypatch.setattr(torch.cuda.tunable, "get_filename", lambda: "res0.csv")
    torch.cuda.tunable._gather_tunableop_results()
    theirs = {p: sorted((tmp_path / p).read_text().splitlines()) for p in ("res_full0.csv", "res_full1.csv")}
    for p in theirs:
        (tmp_path / p).unlink()
    mt.set_filename("res0.csv")
    mt.mgpu_tune_gemm_in_file("untuned?.csv", 1)
    ours = {p: sorted((tmp_path / p).read_text().splitlines()) for p in ("res_full0.csv", "res_full1.csv")}
    assert ours == theirs
    assert len(ours["res_full0.csv"]) == 4  # one validator, three distinct results


def test_cuda_driver_runs_torch_cuda_tunable(monkeypatch):
    """Under the cuda driver every public function is torch.cuda.tunable's (checked here by
    standing in for the driver and for torch.cuda.tunable's getter)."""
    assert all(hasattr(getattr(mt, n), "__wrapped__") for n in mt.__all__)
    monkeypatch.setattr(mt, "_implementation", mt._torch_cuda)
    monkeypatch.setattr(torch.cuda.tunable, "get_max_tuning_duration", lambda: 77)
    assert mt.get_max_tuning_duration() == 77
    monkeypatch.delattr(torch.cuda.tunable, "write_file", raising=False)  # gone in torch 2.13
    with pytest.raises(RuntimeError, match="torch.cuda.tunable has no write_file"):
        mt.write_file("x.csv")
