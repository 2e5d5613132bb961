"""torch_musa.config: every environment variable declared once, read once, checked."""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import torch_musa
import torch_musa.testing
from torch_musa.config import CONFIG, runtime, variables
from torch_musa.config.profiles import PROFILES
from torch_musa.config.variables import VARIABLES

OURS = ("TORCH_MUSA_", "TORCH_USE_MUSA_", "MUSA_", "PYTORCH_MUSA_", "MCCL_")


def test_each_declaration_is_complete():
    for v in VARIABLES.values():
        assert v.name.startswith(OURS) and v.meaning and v.default_text and v.kind.allowed, v.name
        assert v.parse(None) == v.default and v.parse("") == (v.default if not v.empty_is_value else "")


# Bad values: each error names the variable, the value and what is allowed.
BAD = [
    ("TORCH_MUSA_DRIVER", "tpu", "host, cuda"),
    ("TORCH_MUSA_PROFILE", "rtx4090", "s80, s4000, s5000"),
    ("TORCH_MUSA_DEVICE_MEMORY", "1e9", "a size such as"),
    ("TORCH_MUSA_DEVICE_MEMORY", "0", "from 1 byte"),
    ("TORCH_MUSA_HOST_MEMORY_LIMIT", "lots", "a size such as"),
    ("PYTORCH_MUSA_ALLOC_CONF", "max_split_size_mb:one", "max_split_size_mb:N"),
    ("TORCH_MUSA_FALLBACK", "loud", "warn, silent, error"),
    ("TORCH_USE_MUSA_DOUBLE_CAST", "maybe", "1, true, on, yes or 0, false, off, no"),
    ("TORCH_MUSA_OP_DEBUG", "7", "an integer from 0 to 6"),
    ("TORCH_MUSA_OP_DEBUG_LENGTH", "ten", "an integer >= 1"),
    ("TORCH_MUSA_CUDA_COMPAT", "si", "1, true, on, yes"),
    ("MCCL_ENGINE", "mpi", "auto, gloo, nccl"),
    ("MCCL_CHECK_COLLECTIVES", "xyz", "first, all"),
    ("MCCL_STAGE_GLOO", "2", "1, true, on, yes"),
]


@pytest.mark.parametrize("name,value,allowed", BAD)
def test_a_bad_value_names_variable_value_and_what_is_allowed(name, value, allowed):
    with pytest.raises(ValueError) as e:
        runtime.load({name: value})
    assert f"{name}={value!r}" in str(e.value) and allowed in str(e.value), str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("name,value,allowed", [
    ("TORCH_USE_MUSA_DOUBLE_CAST", "maybe", "true, on"),
    ("MCCL_CHECK_COLLECTIVES", "xyz", "first, all"),
    ("TORCH_MUSA_DEVICE_MEMORY", "99999999999GB", "2^62 bytes"),
])
def test_bad_value_fails_the_import(subpython, name, value, allowed):
    r = subpython("import torch_musa", {name: value})
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ValueError: {name}={value!r}") and allowed in last, r.stderr[-2000:]


@pytest.mark.parametrize("value,expected", [("true", True), ("1", True), ("ON", True), ("on", True),
                                            ("false", False), ("0", False), ("OFF", False),
                                            ("off", False), ("", False)])
def test_double_cast_spellings(value, expected):
    assert runtime.load({"TORCH_USE_MUSA_DOUBLE_CAST": value}).double_cast is expected


def test_sizes():
    parse = VARIABLES["TORCH_MUSA_DEVICE_MEMORY"].parse
    assert parse("2GB") == parse("2 gib") == parse("2048M") == 2 << 30
    assert parse("1.5K") == 1536 and parse("1073741824") == 1 << 30
    assert parse(str(1 << 62)) == 1 << 62  # the largest capacity (see the test below)
    with pytest.raises(ValueError, match="too large"):
        parse(str((1 << 62) + 1))
    assert VARIABLES["TORCH_MUSA_HOST_MEMORY_LIMIT"].parse(str((1 << 63) - 1)) == (1 << 63) - 1
    assert VARIABLES["TORCH_MUSA_HOST_MEMORY_LIMIT"].parse("0") == 0  # no limit


def test_load_builds_the_runtime_configuration():
    c = runtime.load({"TORCH_MUSA_PROFILE": "MTT S80", "MUSA_VISIBLE_DEVICES": "1",
                      "TORCH_MUSA_DEVICE_MEMORY": "4GB", "TORCH_MUSA_HOST_MEMORY_LIMIT": "6GB",
                      "PYTORCH_MUSA_ALLOC_CONF": "max_split_size_mb:32,garbage_collection_threshold:0.5",
                      "TORCH_MUSA_OP_DEBUG_LIST": "add, mul", "MCCL_CHECK_COLLECTIVES": "0"})
    assert (c.driver, c.profile.key, c.physical_indices, c.device_count) == ("host", "s80", (1,), 1)
    assert (c.capacity_bytes, c.host_limit_bytes) == (4 << 30, 6 << 30)
    assert (c.allocator.max_split_size_bytes, c.allocator.garbage_collection_threshold) == (32 << 20, 0.5)
    assert c.op_debug_list == ("add", "mul") and c.mccl_check_collectives == "off"
    assert runtime.load({"MUSA_VISIBLE_DEVICES": ""}).device_count == 0
    with pytest.raises(ValueError, match="unknown or malformed option 'expandable_segments:True'"):
        runtime.load({"PYTORCH_MUSA_ALLOC_CONF": "expandable_segments:True"})


def test_cuda_names_stand_in_under_cuda_compat():
    env = {"CUDA_VISIBLE_DEVICES": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:64"}
    assert runtime.load(env).device_count == 2  # not without the switch
    c = runtime.load({**env, "TORCH_MUSA_CUDA_COMPAT": "1"})
    assert c.physical_indices == (1,) and c.allocator.max_split_size_bytes == 64 << 20
    # an explicit musa setting wins
    assert runtime.load({**env, "TORCH_MUSA_CUDA_COMPAT": "1", "MUSA_VISIBLE_DEVICES": "0,1"}).device_count == 2


def test_cuda_driver_sets_the_cuda_names_before_cuda_starts(monkeypatch):
    seen = {}

    def start_cuda():  # what the GPU would report, with the environment CUDA starts in
        seen.update(env)
        return dataclasses.replace(PROFILES["s5000"], key="cuda", num_devices=1)

    monkeypatch.setattr(runtime, "_start_cuda", start_cuda)
    env = {"TORCH_MUSA_DRIVER": "cuda", "MUSA_VISIBLE_DEVICES": "1",
           "PYTORCH_MUSA_ALLOC_CONF": "expandable_segments:True"}
    c = runtime.load(env)
    assert seen["CUDA_VISIBLE_DEVICES"] == "1" and seen["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # CUDA applies the visible devices itself; its allocator takes CUDA's options
    assert c.driver == "cuda" and c.physical_indices == (0,) and c.profile.key == "cuda"
    assert c.allocator.others == ("expandable_segments:True",)


# Issue 34, item 3: CUDA->MUSA environment names have one table, cuda_mapping.yaml's env:
# section. The configuration reads it without PyYAML, derives each variable's CUDA twin from
# it, and translates values with the one function cuda_compat uses too.
def test_the_env_table_reads_as_pyyaml_reads_it():
    from torch_musa.cuda_mapping import load_table

    assert list(variables.CUDA_ENV.items()) == list(load_table().env.items())


def test_the_env_table_reader_refuses_what_it_cannot_read(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("version: 1\nenv:\n  # a comment\n\n  CUDA_X: MUSA_X  # why\nbackends:\n  A: B\n")
    assert variables.read_env_table(str(good)) == {"CUDA_X": "MUSA_X"}
    for text, message in (("env:\n  CUDA_X: [MUSA_X]\n", "CUDA_NAME: MUSA_NAME"),
                          ("env: {CUDA_X: MUSA_X}\n", "no env: section")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            variables.read_env_table(str(bad))


def test_cuda_twins_are_the_mapping_tables():
    twins = {v.name: v.cuda_name for v in VARIABLES.values() if v.cuda_twin}
    assert twins == {"MUSA_VISIBLE_DEVICES": "CUDA_VISIBLE_DEVICES",
                     "PYTORCH_MUSA_ALLOC_CONF": "PYTORCH_CUDA_ALLOC_CONF"}
    assert all(variables.CUDA_ENV[cuda] == musa for musa, cuda in twins.items())
    assert VARIABLES["MUSA_HOME"].cuda_name is None  # CUDA's toolkit is not a MUSA toolkit
    with pytest.raises(ValueError, match="names no CUDA twin"):
        variables.Variable("TORCH_MUSA_NEW", variables.Flag(), False, "`0`", "new", cuda_twin=True)


def _env_name_pairs_in(path):
    """(line, CUDA name, MUSA name) for each env pair of the table whose two names are both
    string constants of the module at ``path``: the mark of a second table."""
    import ast

    constants = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            constants.setdefault(node.value, node.lineno)
    return [(constants[cuda], cuda, musa) for cuda, musa in variables.CUDA_ENV.items()
            if cuda in constants and musa in constants]


def test_no_second_table_of_env_names():
    """No module spells both names of a pair (``{"CUDA_X": "MUSA_X"}``,
    ``Variable("MUSA_X", ..., cuda_name="CUDA_X")``): they come from the mapping table."""
    from pathlib import Path

    package = Path(torch_musa.__file__).parent
    found = [f"{p.relative_to(package)}:{line}: {cuda} -> {musa}"
             for p in sorted(package.rglob("*.py")) for line, cuda, musa in _env_name_pairs_in(p)]
    assert not found, "a second CUDA->MUSA env table:\n" + "\n".join(found)


def test_the_second_table_check_sees_one(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('TWINS = {"CUDA_VISIBLE_DEVICES": "MUSA_VISIBLE_DEVICES"}\n')
    assert _env_name_pairs_in(bad) == [(1, "CUDA_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES")]


def test_cuda_names_stand_in_silently():
    """The configuration drops CUDA-only allocator options without a word (cuda_compat's
    apply_env_aliases, which copies them into os.environ, warns)."""
    import warnings

    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:64",
           "TORCH_MUSA_CUDA_COMPAT": "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runtime.load(env).allocator.text == "max_split_size_mb:64"
    assert variables.from_cuda_names(env) == ({"PYTORCH_MUSA_ALLOC_CONF": "max_split_size_mb:64"},
                                              ["expandable_segments:True"])


def test_the_configuration_is_read_once(monkeypatch):
    """Changing the environment after import changes nothing: the profile, the devices
    and every setting were read once, into the frozen CONFIG everyone reads."""
    from torch_musa.distributed import mccl

    def observed():
        return (torch.musa.get_device_properties(0).name, torch.musa.device_count(),
                torch.musa.is_bf16_supported(), torch.musa.get_amp_supported_dtype(),
                torch_musa.ops.coverage()["profile"], torch_musa.attention.max_flash_head_dim(),
                torch_musa.testing.get_musa_arch(), mccl.engine(2))

    before = observed()
    other = "s80" if CONFIG.profile.key != "s80" else "s5000"
    monkeypatch.setenv("TORCH_MUSA_PROFILE", other)
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("MCCL_ENGINE", "nccl")
    monkeypatch.setenv("TORCH_MUSA_DRIVER", "host")  # profiles are the host driver's
    assert runtime.load(os.environ).profile.key == other  # the variables would have mattered
    assert observed() == before
    with pytest.raises(AttributeError):
        CONFIG.driver = "cuda"  # frozen


def test_python_m_torch_musa_config(capsys):
    from torch_musa.config.__main__ import main

    main(["--markdown"])
    assert capsys.readouterr().out == variables.markdown_table()
    main([])
    out = capsys.readouterr().out
    assert f"profile                  {CONFIG.profile.key} ({CONFIG.profile.name}" in out
    assert f"device_count             {CONFIG.device_count}" in out


# Issue 35, item 15: a max_split_size_mb whose size in bytes no int64 holds reached the C++
# binding as a pybind TypeError at import; the configuration refuses it, naming the range.
@pytest.mark.slow
@pytest.mark.parametrize("value", ["1234567890123456789012345", "8796093022208"])
def test_max_split_size_mb_beyond_int64_is_a_configuration_error(subpython, value):
    spec = f"max_split_size_mb:{value}"
    for env, name in (({"PYTORCH_MUSA_ALLOC_CONF": spec}, "PYTORCH_MUSA_ALLOC_CONF"),
                      ({"PYTORCH_CUDA_ALLOC_CONF": spec, "TORCH_MUSA_CUDA_COMPAT": "1"},
                       "PYTORCH_CUDA_ALLOC_CONF")):
        r = subpython("import torch_musa", env)
        last = r.stderr.strip().splitlines()[-1]
        assert r.returncode != 0 and last.startswith(f"ValueError: {name}={spec!r}"), r.stderr[-2000:]
        assert "max_split_size_mb:N (an integer from 2 to 8796093022207)" in last, last
    largest = runtime.load({"PYTORCH_MUSA_ALLOC_CONF": "max_split_size_mb:8796093022207"})
    assert largest.allocator.max_split_size_bytes == 8796093022207 << 20 <= (1 << 63) - 1
    for divisions in (f"{1 << 64}", f"[256:{1 << 64}]"):  # a size_t of the binding, too
        with pytest.raises(ValueError, match="N a power of two up to 2\\^62"):
            runtime.load({"PYTORCH_MUSA_ALLOC_CONF": f"roundup_power2_divisions:{divisions}"})


@pytest.mark.slow
def test_largest_max_split_size_mb_allocates(subpython):
    r = subpython("import torch; print(float(torch.ones(1000, device='musa').sum()))",
                  {"PYTORCH_MUSA_ALLOC_CONF": "max_split_size_mb:8796093022207"})
    assert r.returncode == 0 and r.stdout.strip() == "1000.0", r.stderr[-2000:]


# Issue 35, item 16: the allocator's limit is capacity x fraction in a double, so the documented
# maximum 2^63-1 became 2^63 (no int64) and every allocation failed; the maximum is now 2^62.
@pytest.mark.slow
@pytest.mark.requires_host_driver("TORCH_MUSA_DEVICE_MEMORY sets the host driver's capacity; "
                                  "the cuda driver's is the GPU's")
def test_the_largest_device_memory_works(subpython):
    code = "import torch; print(float(torch.ones(128, device='musa').sum()), torch.musa.mem_get_info()[1])"
    r = subpython(code, {"TORCH_MUSA_DEVICE_MEMORY": str(1 << 62)})
    assert r.returncode == 0 and r.stdout.split() == ["128.0", str(1 << 62)], r.stderr[-2000:]
    r = subpython("import torch_musa", {"TORCH_MUSA_DEVICE_MEMORY": str((1 << 63) - 1)})
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and last.startswith(
        "ValueError: TORCH_MUSA_DEVICE_MEMORY='9223372036854775807': too large") and "2^62 bytes" in last, r.stderr


# Issue 35, item 17: an op log directory that is a file, or cannot be created, failed the import
# with a bare FileExistsError; the error names TORCH_MUSA_OP_DEBUG_DIR.
@pytest.mark.slow
@pytest.mark.parametrize("where,why", [("file", "exists and is not a directory"),
                                       ("file/sub", "is not a directory")])
def test_op_debug_dir_that_cannot_be_a_directory(subpython, tmp_path, where, why):
    (tmp_path / "file").write_text("")
    directory = str(tmp_path / where)
    r = subpython("import torch_musa", {"TORCH_MUSA_OP_DEBUG": "1", "TORCH_MUSA_OP_DEBUG_DIR": directory})
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and last.startswith(f"ValueError: TORCH_MUSA_OP_DEBUG_DIR={directory!r}"), r.stderr
    assert why in last, last
    with pytest.raises(ValueError, match="TORCH_MUSA_OP_DEBUG_DIR"):
        runtime.load({"TORCH_MUSA_OP_DEBUG": "1", "TORCH_MUSA_OP_DEBUG_DIR": directory})
    assert runtime.load({"TORCH_MUSA_OP_DEBUG_DIR": directory}).op_debug_level == 0  # unused: not checked


# Issue 35, item 18: a bad variable failed every `import torch` in that environment ("Failed to
# load the backend extension"), CPU-only scripts included, through torch's autoload. It is a
# warning naming the variable; musa reports the error when used; `import torch_musa` raises it.
AUTOLOAD_USE = """
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch
    print("warned:", any("{name}" in str(w.message) for w in caught))
    print("cpu:", float(torch.ones(3).sum()), torch.musa.is_available(), torch.musa.device_count())
    for use in (lambda: torch.zeros(1, device="musa"), lambda: torch.ones(1).to("musa"),
                lambda: torch.musa.synchronize(), lambda: __import__("torch_musa")):
        try:
            use()
            print("no error")
        except ValueError as e:
            print("raised:", str(e).startswith("{name}="))
"""


@pytest.mark.slow
@pytest.mark.parametrize("env,name", [
    ({"TORCH_MUSA_FALLBACK": "loud"}, "TORCH_MUSA_FALLBACK"),
    ({"PYTORCH_MUSA_ALLOC_CONF": "max_split_size_mb:8796093022208"}, "PYTORCH_MUSA_ALLOC_CONF"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:8796093022208", "TORCH_MUSA_CUDA_COMPAT": "1"},
     "PYTORCH_CUDA_ALLOC_CONF"),
])
def test_a_bad_value_does_not_fail_import_torch(subpython, env, name):
    r = subpython(AUTOLOAD_USE.replace("{name}", name), {**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[:-1] == ["warned: True", "cpu: 3.0 False 0"] + ["raised: True"] * 4, \
        r.stdout + r.stderr[-2000:]


@pytest.mark.slow
def test_musa_loads_once_the_environment_is_fixed(subpython):
    r = subpython("""
        import os, warnings
        warnings.simplefilter("ignore")
        import torch
        assert not torch.musa.is_available()
        del os.environ["TORCH_MUSA_FALLBACK"]
        import torch_musa
        print(torch.musa.is_available(), (torch.ones(2, device="musa") + 1).tolist())
    """, {"TORCH_MUSA_FALLBACK": "loud", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert r.returncode == 0 and r.stdout.split() == ["True", "[2.0,", "2.0]"], r.stderr[-3000:]
