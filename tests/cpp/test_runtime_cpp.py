"""The C++ unit tests of the host driver and the caching allocator
(runtime_tests.cpp), built with those sources into a module of their own."""
from pathlib import Path

import pytest
from torch.utils.cpp_extension import load

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "torch_musa" / "csrc"
# The bottom layers only: the driver, the device/stream state, the allocators.
SOURCES = [CSRC / "driver" / "Driver.cpp", CSRC / "driver" / "HostDriver.cpp"] + [
    CSRC / "core" / f for f in ("Device.cpp", "MUSAStream.cpp", "DeviceAllocator.cpp",
                                "MUSACachingAllocator.cpp", "PluggableAllocator.cpp",
                                "DriverAllocator.cpp", "KernelAllocation.cpp", "Storage.cpp",
                                "PinnedAllocator.cpp")]
TESTS = ["driver_memory_and_copies", "driver_stream_timeline", "driver_events_time_and_order",
         "driver_device_synchronize_waits_for_every_stream", "allocator_rounds_counts_and_caches",
         "allocator_out_of_memory_is_clear_and_recoverable", "allocator_fraction_and_split_limit"]


@pytest.fixture(scope="module")
def runtime_tests(tmp_path_factory):
    # A build folder of its own: nothing a killed earlier build left (a lock) can hang it.
    return load(name="torch_musa_runtime_tests",
                sources=[str(Path(__file__).with_name("runtime_tests.cpp"))] + [str(s) for s in SOURCES],
                extra_include_paths=[str(CSRC)], extra_cflags=["-O1"], verbose=False,
                build_directory=str(tmp_path_factory.mktemp("runtime_tests")))


def test_every_cpp_test_is_collected(runtime_tests):
    assert sorted(runtime_tests.names()) == sorted(TESTS)


@pytest.mark.parametrize("name", TESTS)
def test_cpp(runtime_tests, name):
    failure = runtime_tests.run(name)
    assert failure == "", f"{name}: {failure}"
