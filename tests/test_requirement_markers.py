"""The requirement markers (tests/conftest.py): under a run that lacks the devices or the
profile a test needs, it is skipped with the reason; a host-driver test under another
driver must run and fail (xfail strict); a malformed marker is a usage error."""
import pytest

from tests.conftest import requirement_outcome


def marks(*decorators):
    return [d.mark for d in decorators]


HOST = pytest.mark.requires_host_driver("the host allocator's segments")
TWO = pytest.mark.requires_devices(2)
S4000 = pytest.mark.requires_profile("s80", "s4000", reason="no float64")


def test_a_run_that_meets_every_requirement_runs_the_test():
    assert requirement_outcome(marks(HOST, TWO, S4000), "host", "s4000", 2) is None
    assert requirement_outcome(marks(TWO), "cuda", "cuda", 8) is None
    assert requirement_outcome([], "cuda", "cuda", 1) is None


def test_too_few_devices_or_another_profile_skip_with_the_reason():
    assert requirement_outcome(marks(TWO), "cuda", "cuda", 1) == \
        ("skip", "needs 2 musa devices, this run has 1")
    kind, reason = requirement_outcome(marks(S4000), "host", "s5000", 2)
    assert kind == "skip" and reason == "needs hardware profile s80 or s4000, this run has s5000 (no float64)"
    # a skip wins over an expected failure: there is nothing to run
    assert requirement_outcome(marks(HOST, TWO), "cuda", "cuda", 1)[0] == "skip"


def test_host_driver_tests_are_strict_expected_failures_elsewhere():
    kind, reason = requirement_outcome(marks(HOST), "cuda", "cuda", 2)
    assert kind == "xfail" and reason == "host driver only (cuda driver here): the host allocator's segments"


def test_a_host_test_unsafe_elsewhere_is_skipped_not_run():
    """A strict xfail still runs the test; one whose code would poison the GPU's context
    (a device-side assert) is skipped under another driver, and runs on the host."""
    unsafe = pytest.mark.requires_host_driver("an out-of-range index", unsafe_elsewhere=True)
    kind, reason = requirement_outcome(marks(unsafe), "cuda", "cuda", 2)
    assert kind == "skip" and "unsafe to run under the cuda driver" in reason
    assert requirement_outcome(marks(unsafe), "host", "s4000", 2) is None


@pytest.mark.parametrize("bad", [pytest.mark.requires_devices(0), pytest.mark.requires_devices("2"),
                                 pytest.mark.requires_profile(), pytest.mark.requires_profile("S4000"),
                                 pytest.mark.requires_host_driver(), pytest.mark.requires_host_driver(" ")])
def test_a_malformed_marker_is_a_usage_error(bad):
    with pytest.raises(pytest.UsageError):
        requirement_outcome(marks(bad), "host", "s4000", 2)


def test_the_markers_are_registered(pytestconfig):
    registered = " ".join(pytestconfig.getini("markers"))
    for name in ("requires_host_driver", "requires_devices", "requires_profile"):
        assert f"{name}(" in registered


def test_a_claim_another_driver_may_meet_is_a_loose_expected_failure():
    """Bits equal to the CPU's: a GPU kernel meets that for some inputs and not others,
    so under another driver such a test may pass without the mark being stale."""
    loose = pytest.mark.requires_host_driver("CPU kernels bit for bit", may_pass_elsewhere=True)
    assert requirement_outcome(marks(loose), "host", "s4000", 2) is None
    assert requirement_outcome(marks(loose), "cuda", "cuda", 2) == \
        ("xfail_loose", "host driver only (cuda driver here, may pass): CPU kernels bit for bit")
    # with a strict mark beside it, the test must fail
    assert requirement_outcome(marks(loose, HOST), "cuda", "cuda", 2)[0] == "xfail"
