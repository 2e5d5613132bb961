"""Streams and events, on torch.Stream / torch.Event (through the musa guard)."""
from __future__ import annotations

from typing import Any

import torch

from torch_musa import _C
from torch_musa.core import _lazy
from torch_musa.core.device import _get_device_index


class Stream(torch.Stream):
    """A musa stream: work queued on it runs in order; streams run independently."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs.get("stream_id") is not None:
            return super().__new__(cls, **kwargs)
        _lazy._lazy_init()
        idx = _get_device_index(device, optional=True)
        with torch.musa.device(idx):
            return super().__new__(cls, device=torch.device("musa", idx), priority=priority)

    @property
    def priority(self) -> int:
        # Pool ids 1..32 are normal priority, 33..64 high (see csrc/core/MUSAStream.cpp).
        return -1 if 33 <= self.stream_id <= 64 else 0

    @staticmethod
    def priority_range() -> tuple[int, int]:
        return 0, -1

    def wait_event(self, event: "Event | torch.Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Work queued on this stream after the call waits for ``stream``'s queued work."""
        event = Event()
        event.record(stream)
        event.wait(self)

    def synchronize(self) -> None:
        """Wait for the work queued on this stream (Ctrl-C interrupts the wait)."""
        _C._synchronize_stream(self.device_index, self.stream_id)

    def record_event(self, event: "Event | None" = None) -> "Event":
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, torch.Stream) and super().__eq__(other)

    __hash__ = torch.Stream.__hash__

    @property
    def musa_stream(self) -> int:
        """The driver's handle of this stream (a ``cudaStream_t`` under the cuda driver)."""
        return _C._stream_handle(self.device_index, self.stream_id)

    def __repr__(self) -> str:
        # The real torch_musa's text, word for word (torch.cuda's is "<torch.cuda.Stream ...>").
        return f"torch_musa.Stream device={self.device} musa_stream={self.musa_stream:#x}"


class ExternalStream(Stream):
    """A stream created elsewhere, identified by its native handle."""

    def __new__(cls, stream_ptr: int, device: Any = None, **kwargs):
        idx = _get_device_index(device, optional=True)
        return super().__new__(
            cls, stream_id=int(stream_ptr), device_index=idx, device_type=_device_type_code()
        )


def get_stream_from_external(data_ptr: int, device: Any = None) -> Stream:
    """A :class:`Stream` for a stream another library created (its native handle as an
    int), on ``device``; the caller keeps that stream alive (torch.cuda's function)."""
    ext = ExternalStream(data_ptr, device)
    return Stream(stream_id=ext.stream_id, device_index=ext.device_index, device_type=ext.device_type)


def _device_type_code() -> int:
    # torch.Stream(stream_id=, device_index=, device_type=) takes the c10
    # DeviceType code; PrivateUse1 is 20.
    return 20


class Event:
    """A marker in a stream; with enable_timing it measures device time.

    Wraps a ``torch.Event`` (whose methods accept only exact torch.Event peers).
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("musa events cannot be shared between processes on the host driver")
        self._event = torch.Event(device="musa", enable_timing=enable_timing, blocking=blocking)

    @classmethod
    def _wrap(cls, event: torch.Event) -> "Event":
        obj = cls.__new__(cls)
        obj._event = event
        return obj

    def record(self, stream: torch.Stream | None = None) -> None:
        self._event.record(current_stream() if stream is None else stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        self._event.wait(current_stream() if stream is None else stream)

    def query(self) -> bool:
        return self._event.query()

    def synchronize(self) -> None:
        """Wait until the event has completed (Ctrl-C interrupts the wait)."""
        _C._synchronize_event(self._event.event_id)

    def elapsed_time(self, end_event: "Event | torch.Event") -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, timing on)."""
        other = end_event._event if isinstance(end_event, Event) else end_event
        if self.event_id and other.event_id and self._event.device != other.device:
            # cudaEventElapsedTime refuses too (invalid resource handle); name the devices.
            raise RuntimeError(
                f"elapsed_time: the events were recorded on different devices ({self._event.device} "
                f"and {other.device}); only events of one device can be timed against each other")
        return self._event.elapsed_time(other)

    @property
    def device(self) -> torch.device | None:
        """The device of the stream that recorded the event; None until the first record
        (torch.cuda.Event's, whose event is created then)."""
        return self._event.device if self.event_id else None

    @property
    def event_id(self) -> int:
        return self._event.event_id

    @property
    def musa_event(self) -> int:
        """The event's handle (its ``event_id``); 0 until the first record (torch.cuda's ``cuda_event``)."""
        return self._event.event_id

    def ipc_handle(self):
        raise NotImplementedError("musa events cannot be shared between processes on the host driver")

    def __repr__(self) -> str:
        # The real torch_musa's (and, with its name, torch.cuda's) text.
        if self.musa_event:
            return f"<torch_musa.Event {self.musa_event:#x}>"
        return "<torch_musa.Event uninitialized>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: Any = None) -> Stream:
    _lazy._lazy_init()
    return _wrap(torch.accelerator.current_stream(_get_device_index(device, optional=True)))


def default_stream(device: Any = None) -> Stream:
    _lazy._lazy_init()
    idx = _get_device_index(device, optional=True)
    return Stream(stream_id=0, device_index=idx, device_type=_device_type_code())


def set_stream(stream: torch.Stream | None) -> None:
    if stream is None:
        return
    _lazy._lazy_init()
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes ``stream`` current on its device (and that device current) inside."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.src_prev_stream = None
        self.dst_prev_stream = None
        self.prev_device = None

    def __enter__(self):
        if self.stream is None:
            return
        _lazy._lazy_init()
        self.prev_device = _C._get_device()
        self.src_prev_stream = current_stream(self.prev_device)
        if self.stream.device_index != self.prev_device:
            _C._set_device(self.stream.device_index)
            self.dst_prev_stream = current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        if self.dst_prev_stream is not None:
            torch.accelerator.set_stream(self.dst_prev_stream)
            _C._set_device(self.prev_device)
        torch.accelerator.set_stream(self.src_prev_stream)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


def _sleep(cycles: int) -> None:
    """Keep the current stream busy for ``cycles`` device clock cycles."""
    _lazy._lazy_init()
    _C._sleep(int(cycles))
