"""The kernel-device compile route as the tests drive it: Inductor with every inner
compilation moved to the kernel device (the CPU here, the GPU under the cuda driver)."""
import torch
from torch._inductor.compile_fx import compile_fx, compile_fx_inner

from torch_musa._inductor.kernel_device import KernelDeviceCompile
from torch_musa.config import CONFIG

KIND = "cuda" if CONFIG.driver == "cuda" else "cpu"


def route_backend(seen):
    """A torch.compile backend; ``seen(gm)`` is called with each graph as Inductor's inner
    compile receives it (after the move)."""
    def inner(gm, example_inputs, *args, **kwargs):
        seen(gm)
        return compile_fx_inner(gm, example_inputs, *args, **kwargs)

    def backend(gm, example_inputs):
        if KIND == "cuda":  # the default backend already moves (backend.register)
            return compile_fx(gm, example_inputs, inner_compile=inner)
        return compile_fx(gm, example_inputs, inner_compile=KernelDeviceCompile(inner, KIND))
    return backend


def placeholder_devices(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.meta["val"].device) for n in gm.graph.find_nodes(op="placeholder")
            if isinstance(n.meta.get("val"), torch.Tensor)]
