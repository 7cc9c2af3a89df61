"""gradreg's built-in op families, each a plugin registered through the entry-point group
``gradreg.plugins`` exactly like a third-party package: array, math, nn, image, sparse,
control_flow, function_call, training, random, onnx. Each family owns its op definitions,
kernels, shape functions and gradient rules (CONTRIBUTING.md, "The layout of a family").

Beside the families: ``rule_helpers``, what their gradient rules share (public to every family),
and ``_lazy``, a module imported on first attribute access."""
