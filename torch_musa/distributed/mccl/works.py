"""The Works the Python kernels hand back, and how a collective completes.

Synchronous calls wait inside the kernel, so a failure is raised there, naming
the collective. Asynchronous ones return a :class:`MusaWork` whose ``wait()``
raises that error and whose future yields the musa tensors. Each is handed out
inside a C++ Work that owns it (:func:`held`, ``csrc/py_work.cpp``). A backend
future is followed in C++ (:func:`chain`), never by a Python callback: those run
on the backend's threads, which outlive the interpreter. Gloo works without a
future of their own (reduce_scatter, send, recv) complete on the completer's
threads.
"""
from __future__ import annotations

import atexit
import queue
import threading
import time

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from torch_musa.distributed import _C as _mccl_C  # loading it registers the C++ kernels
from torch_musa.distributed.mccl.aliases import ALIAS_DEVICE, staging_scope
from torch_musa.distributed.mccl.errors import MCCLError, checks_all, error_head, named, named_error

_work_from_future = _c10d._create_work_from_future


def done_future(value):
    f = torch.futures.Future()
    f.set_result(value)
    return f


#: The caller only waits on a synchronous call's Work (already done): one shared, boxed one.
DONE_WORK = _work_from_future(done_future([])).boxed()


def done_work(value):
    """A completed Work whose future yields ``value``."""
    return _work_from_future(done_future(value)).boxed()


def held(work):
    """``work`` boxed inside a C++ Work that owns it: the Python object lives as long
    as anyone, C++ or Python, holds the Work (csrc/py_work.cpp)."""
    return _mccl_C._hold_work(work).boxed()


def fail(fut, errors, err):
    """Complete ``fut`` with a real error (seen through C++ as well, unlike
    ``Future.set_exception``) and keep ``err`` for the Work's ``wait()`` to raise."""
    errors.append(err)
    _mccl_C._set_future_error(fut, err)


def chain(out, parent, name, backend, tensors, value, each=False):
    """Complete ``out`` when ``parent`` (a backend's future) completes: with ``value``, or
    with an error naming the collective. ``each``: ``parent`` is ``collect_all``'s future
    and any failed one fails ``out``. The callback is C++ holding no Python object
    (``csrc/py_work.cpp``: a Python one there aborted the process at exit)."""
    _mccl_C._chain_future(out, parent, value, error_head(name, backend, tensors), checks_all(), each)
    return out


def _flat_tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat_tensors(v)


class MusaWork(dist.Work):
    """The Work of an asynchronous mccl collective.

    ``wait()`` raises the collective's error (naming it), ``is_completed()``
    polls, ``get_future()`` yields the musa tensors. It is handed out only inside
    a held Work (:func:`held`): a Python subclass of ``Work`` lives in its Python
    object, and C++ holders of it alone (DDP, the functional collectives'
    registry) would otherwise reach the base ``Work::wait`` once it was collected.
    """

    def __init__(self, fut, name, errors=None, named=False):
        super().__init__()
        self._fut = fut
        self._name = name
        self._errors = errors
        self._named = named  # the future's errors are mccl's (chain): raised as MCCLError

    def _error(self, exc):
        if self._errors:  # the MCCLError itself, not the future's RuntimeError
            return self._errors[0]
        if self._named and not isinstance(exc, MCCLError):
            return MCCLError(str(exc))
        return exc

    def wait(self, timeout=None):  # noqa: ARG002  (Gloo enforces the group's timeout)
        try:
            self._fut.wait()
        except Exception as exc:
            err = self._error(exc)
            if err is exc:
                raise
            raise err from None
        return True

    def get_future(self):
        return self._fut

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        if not self._fut.done():
            raise RuntimeError("mccl work is not completed yet")
        return self.exception() is None

    def exception(self):
        if not self._fut.done():
            return None
        try:
            self._fut.value()
        except Exception as exc:  # noqa: BLE001
            return self._error(exc)
        return None

    def result(self):
        return list(_flat_tensors(self._fut.wait()))

    def synchronize(self):
        self.wait()

    def __repr__(self):
        return f"<mccl Work {self._name} completed={self.is_completed()}>"


class _InFlight:
    """The backend works the Python kernels issued, each held here until its Python
    object is all that is left of it (Gloo's thread has let go), then dropped on a
    Python thread.

    Gloo's works hold the host aliases of the musa tensors, which the kernels made in
    Python: the thread that drops such a work's last reference frees their Python
    objects and needs the GIL. On Gloo's own thread during interpreter shutdown that
    aborts the process (CPython 3.11 ends the thread with pthread_exit), and the group
    can outlive destroy_process_group (the functional collectives keep it). So at exit
    (:meth:`drain`, an atexit hook) every such work is waited for and released here.
    """

    _SOLE = 2  # _work_refs of a work only its Python object holds (the call's own reference included)

    def __init__(self):
        self._lock = threading.Lock()
        self._works = []
        self._prune_at = 64

    def add(self, work):
        """Hold ``work`` (a backend Work, or None) until Gloo is done with it; returns it."""
        if work is None:
            return work
        with self._lock:
            self._works.append(work)
            if len(self._works) >= self._prune_at:
                self._works = [w for w in self._works if not self._released(w)]
                self._prune_at = max(64, 2 * len(self._works))
        return work

    def _released(self, w):
        return w.is_completed() and _mccl_C._work_refs(w) <= self._SOLE

    def drain(self, grace=1.0):
        """Wait for every held work (Gloo bounds each by its group's timeout), give Gloo's
        threads ``grace`` seconds to let go of them, and drop them here."""
        with self._lock:
            works, self._works = self._works, []
        for w in works:
            try:
                w.wait()
            except Exception:  # noqa: BLE001  (its caller saw the error)
                pass
        deadline = time.monotonic() + grace
        for w in works:
            while _mccl_C._work_refs(w) > self._SOLE and time.monotonic() < deadline:
                time.sleep(0.001)
        w = None  # noqa: F841
        works.clear()  # the last references go here


#: Backend works of the Python kernels until Gloo lets go of them; see :class:`_InFlight`.
inflight = _InFlight()


class _Completer:
    """Completes futures for Gloo works that have none (reduce_scatter, send, recv).

    One thread per outstanding work (threads are reused once idle), so a work
    never waits behind another one, whatever order the ranks complete them in.
    The threads are joined at exit (:meth:`close`, an atexit hook), before the
    interpreter finalizes: a daemon thread still inside a work's ``wait()`` then
    would take the GIL back during finalization, where CPython 3.11 ends it with
    pthread_exit, and that unwind through pybind's GIL guard aborts the process.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = 0
        self._q = queue.SimpleQueue()
        self._threads = []
        self._closed = False

    def complete(self, work, name, backend, tensors, value):
        """A held Work that completes (its future yielding ``value``) once ``work`` has,
        waited on here rather than on a thread per call."""
        fut, errors = torch.futures.Future(), []
        # The error's head, not the backend: a waiting thread holding the backend would keep
        # the group (and Gloo's threads) alive past destroy_process_group.
        self._submit((work, fut, errors, error_head(name, backend, tensors), value))
        return held(MusaWork(fut, name, errors))

    def close(self):
        """Finish the works handed over so far and join the threads (at exit; a later
        work completes in its caller). A work waits no longer than its group's timeout."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        for _ in threads:
            self._q.put(None)  # after every queued work: each thread takes one and ends
        for t in threads:
            t.join()

    def _submit(self, item):
        with self._lock:  # queued (and its thread started) before close() can queue the stops
            if not self._closed:
                if self._idle:
                    self._idle -= 1
                else:
                    t = threading.Thread(target=self._run, name="mccl-completer", daemon=True)
                    t.start()
                    self._threads.append(t)
                self._q.put(item)
                return
        _complete(*item)

    def _run(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            _complete(*item)
            del item
            with self._lock:
                self._idle += 1


#: Completes the works passed to it (anything with ``wait()``); see :class:`_Completer`.
completer = _Completer()


@atexit.register
def _settle_at_exit():
    """Before the interpreter finalizes: the completer's threads end, then the backend
    works still held are waited for and released on this thread."""
    completer.close()
    inflight.drain()


class CopyBack:
    """Waits on a work, then copies its results into the (aliased) outputs."""

    def __init__(self, work, dsts, srcs):
        self.work, self.dsts, self.srcs = work, dsts, srcs

    def wait(self):
        self.work.wait()
        for d, x in zip(self.dsts, self.srcs):
            d.copy_(x)
        return True


class Seq:
    """Waits on several works in order."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()
        return True


def _device_of(*values):
    for v in values:
        for t in ([v] if isinstance(v, torch.Tensor) else v if isinstance(v, (list, tuple)) else []):
            if isinstance(t, torch.Tensor) and t.device.type == "musa":
                return t.device
            if isinstance(t, (list, tuple)):
                d = _device_of(t)
                if d is not None:
                    return d
    return torch.device("musa", torch.musa.current_device())


def _complete(work, out, errors, head, value):
    """Complete ``out`` with ``value`` once ``work.wait()`` returns, or with the error it
    raised, named after the collective (``head``: :func:`~errors.error_head`)."""
    try:
        work.wait()
    except Exception as exc:  # noqa: BLE001
        fail(out, errors, named(head, exc))
    else:
        out.set_result(value)


def finish(name, backend, work, async_op, value, tensors, has_future=True):
    """Sync: wait here (errors name the collective). Async: a Work whose future yields ``value``."""
    if work is None:  # NCCL's blocking calls run on the current stream and return no Work
        return DONE_WORK
    inflight.add(work)
    scope = staging_scope()
    if scope is not None and not has_future:
        # Staged point-to-point (send/recv; reduce_scatter alike): completing it here could
        # deadlock (the peer may wait for this rank's next call), so a completer thread
        # waits for it and writes the received host copies back.
        pairs = [] if name == "send" else list(scope.values())
        scope.clear()  # nothing left for run_staged to copy back
        return completer.complete(CopyBack(work, [t for t, _ in pairs], [h for _, h in pairs]), name, backend,
                                  tensors, value)
    if scope is not None:  # a staged Gloo call completes here
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001
            raise named_error(name, backend, tensors, exc) from exc
        return done_work(value)
    if not async_op:
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001
            raise named_error(name, backend, tensors, exc) from exc
        return DONE_WORK
    if not has_future:
        return completer.complete(work, name, backend, tensors, value)
    fut = chain(_out_future(value, tensors), work.get_future(), name, backend, tensors, value)
    return held(MusaWork(fut, name, named=True))


def _out_future(value, tensors):
    """The future a Work hands out. With CUDA aliases, stream-ordered: a future on the
    musa device (its events order the consumers after the collective)."""
    if ALIAS_DEVICE == "cuda":
        return torch.futures.Future(devices=[_device_of(value, tensors)])
    return torch.futures.Future()


def finish_many(name, backend, works, async_op, value, tensors):
    """:func:`finish` for a call issued as several backend works (coalesced collectives)."""
    works = [inflight.add(w) for w in works if w is not None]  # NCCL's blocking calls return none
    if not async_op:
        for w in works:
            try:
                w.wait()
            except Exception as exc:  # noqa: BLE001
                raise named_error(name, backend, tensors, exc) from exc
        return works[-1].boxed() if works else done_work(value)
    all_done = torch.futures.collect_all([w.get_future() for w in works])
    fut = chain(_out_future(value, tensors), all_done, name, backend, tensors, value, each=True)
    return held(MusaWork(fut, name, named=True))
