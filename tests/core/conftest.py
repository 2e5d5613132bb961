"""Runtime tests count allocated bytes across a window (`memory_allocated()`
before and after). Python's automatic collection can run inside that window and
free musa tensors that earlier tests left in reference cycles: a CI run saw
test_ipc's count fall by 1,536 bytes that way. Automatic collection is off while
a test runs here (explicit gc.collect() still works) and on between tests."""
import gc

import pytest


@pytest.fixture(autouse=True)
def _no_automatic_gc_inside_a_test():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
