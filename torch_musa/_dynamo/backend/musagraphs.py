"""The real torch_musa's path of the ``musagraphs`` dynamo backend.

The backend is ``torch_musa._inductor.musagraphs`` (registered with dynamo when its
backend registry is imported, so ``torch.compile(backend="musagraphs")`` needs no import).
"""
from torch_musa._inductor.musagraphs import MusagraphsBackend, musagraphs, register

__all__ = ["MusagraphsBackend", "musagraphs"]

register()
