"""The nn op family: activations, softmax and cross entropies, bias addition, 2-D and 3-D convolution
and pooling with their backprop ops (``conv``, ``pooling``, ``volumes``; pooling with argmax),
fractional pooling (``fractional``), morphological dilation (``morphology``), the spatial
rearrangements SpaceToBatch/DepthToSpace and patch extraction (``spatial``), CTC loss (``ctc``), the
fused LSTMs BlockLSTM / BlockLSTMV2 (``recurrent``), simulated quantization (``quantize``),
NthElement / IsotonicRegression (``selection``), L2 loss, top-k membership, batch and
local response normalization. Owns each op's definition, NumPy kernel, shape function, Python
builder and gradient rule; the topic modules hold all four for their ops, ``ops`` / ``kernels`` /
``grads`` those of the rest.

Where gradreg differs from TensorFlow, the module that owns the op says so in its docstring
(grads: cross entropies, batch normalization's statistics; image transforms are in the image
family)."""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "nn", lazy_kernels={"numba": "gradreg_plugins.nn.numba_kernels"},
    kernel_modules=["gradreg_plugins.nn.conv", "gradreg_plugins.nn.kernels", "gradreg_plugins.nn.pooling"],
    gradient_modules=["gradreg_plugins.nn.grads"],
)

# The modules other families may import (tests/test_architecture.py holds every other module private
# to this family): kernels: round_bfloat16, which image's kernels round with.
public_modules = ("kernels",)

from gradreg_plugins.nn import (  # noqa: E402,F401  (they fill the family's tables)
    api,
    ctc,
    fractional,
    morphology,
    namespaces,
    ops,
    quantize,
    recurrent,
    selection,
    spatial,
    top_k,
    volumes,
)
