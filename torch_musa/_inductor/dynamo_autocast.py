"""Dynamo traces ``torch.musa.amp.autocast`` as it traces ``torch.cuda.amp.autocast``.

Dynamo knows its context managers by identity: ``supported_ctx_manager_classes`` (in
``torch._dynamo.variables.torch``) says which classes become a
``TorchCtxManagerClassVariable``, and that variable's ``call_function`` turns only
``torch.amp.autocast`` / ``torch.cuda.amp.autocast`` / ``torch.cpu.amp.autocast`` into
an ``AutocastModeVariable`` (one ``_enter_autocast`` node and one ``_exit_autocast``
node in the graph). Without this module dynamo inlines musa's ``__init__`` and
``__enter__`` and the graph holds every ``torch.set_autocast_*`` call they make.

:func:`register` adds musa's class to the set and answers its calls with an
``AutocastModeVariable`` for device ``"musa"``; it checks the dtype first, so a
compiled function raises where eager raises (bfloat16 on a profile without it).
An *instance* of the class needs nothing: dynamo wraps any
``torch.amp.autocast`` instance already.
"""
from __future__ import annotations

import inspect

__all__ = ["register"]

_registered = False


def _musa_autocast():
    # torch.musa.amp is attached by torch_musa.amp.register() (an independent subsystem,
    # not imported from here), before _inductor.install() hooks dynamo's import
    import torch

    return torch.musa.amp.autocast


def register(_module=None) -> None:
    """Idempotent; run once ``torch._dynamo.variables.torch`` has loaded."""
    global _registered
    if _registered:
        return
    from torch._dynamo.variables import torch as dyn_torch
    from torch._dynamo.variables.ctx_manager import AutocastModeVariable
    from torch._dynamo.variables.base import VariableTracker

    autocast = _musa_autocast()
    dyn_torch.supported_ctx_manager_classes[autocast] = None

    cls = dyn_torch.TorchCtxManagerClassVariable
    original = cls.call_function
    signature = inspect.signature(autocast.__init__)

    def call_function(self, tx, args, kwargs):
        if self.value is not autocast:
            return original(self, tx, args, kwargs)
        bound = signature.bind(None, *args, **kwargs)
        bound.apply_defaults()
        values = {}
        for key in ("dtype", "enabled", "cache_enabled"):
            value = bound.arguments[key]
            values[key] = value.as_python_constant() if isinstance(value, VariableTracker) else value
        if values["enabled"]:
            autocast._validate(values["dtype"])
        return AutocastModeVariable(
            ["musa", values["dtype"], values["enabled"], values["cache_enabled"]],
            initial_values=None,
        )

    call_function.__wrapped__ = original
    cls.call_function = call_function
    _registered = True
