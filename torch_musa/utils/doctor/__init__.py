"""musa-doctor: will a (CUDA) training script run on a MUSA card, and how fast?

``musa-doctor [--profile s80|s4000|s5000] script.py [args]`` runs the script on
the host driver under that card's profile for a few optimizer steps and reports
its ops (native on the real torch_musa or not), the dtypes each card lacks with
the user's lines, memory against each card's capacity, host<->device syncs,
CUDA-only APIs, and a roofline estimate of the step time (docs/DOCTOR.md).

One module per concern: ``session`` (the collectors around a run: ``ops``,
``memory``, ``syncs``, ``cuda_isms``, with ``frames`` finding the user's lines),
``worker`` (the process running the script), ``cards`` and ``native_ops`` (data
under ``data/`` with its sources), ``roofline`` (the estimate), ``report`` (the
analysis), ``sections``/``render``/``html_page``/``charts`` (the outputs), ``cli``.
"""
from torch_musa.utils.doctor.cli import main

__all__ = ["main"]
