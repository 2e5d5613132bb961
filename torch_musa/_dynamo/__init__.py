"""``torch_musa._dynamo``: the real torch_musa's path of musa's dynamo device interface.

``MusaInterface`` is ``torch_musa._inductor.device_interface.MusaInterface``, the class
dynamo answers for ``"musa"``; importing this module registers it (it is otherwise
registered when ``torch._dynamo.device_interface`` is first imported). ``backend.musagraphs``
is the ``musagraphs`` backend's path.
"""
from torch._dynamo.device_interface import (
    get_registered_device_interfaces,
    register_interface_for_device,
)

from torch_musa._dynamo.backend import musagraphs
from torch_musa._inductor.device_interface import MusaInterface, register

__all__ = ["MusaInterface", "get_registered_device_interfaces", "register_interface_for_device"]

register()
