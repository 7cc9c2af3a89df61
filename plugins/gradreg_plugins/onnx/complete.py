"""The onnx family's tables, filled when the registry first needs them (see the package's
``family``): the modules fill them as they are imported; onnx.reference's kernel then covers
every op left without one."""
from gradreg_plugins.onnx import control_flow, family, fast_kernels, grads, kernels, ops, shapes  # noqa: F401

shapes.register(family)
kernels.register_fallbacks()
