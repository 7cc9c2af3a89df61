"""The onnx op family: ONNX's operators as gradreg op types ``onnx::<OpType>``.

Definitions mirror the ONNX schemas of one opset (the newest the onnx package the table was
generated from defines; see :mod:`schemas`), so every model gradreg loads is brought to that
opset first. Kernels: onnx.reference for every op (needs the ``onnx`` extra), NumPy kernels
for the ops that dominate real models, and gradreg's own interpreter for If, Loop, Scan and
SequenceMap, whose subgraphs are library functions. Gradient rules emit onnx ops, so the
gradient graph of an ONNX model is itself an ONNX graph.
"""
from gradreg.plugin import OpFamily

# Every op type of this family is ``<namespace>::<OpType>`` (schema_table.NAMESPACES): the
# registry reads the family's tables, whose 227 definitions take ~70 ms to build, only when a
# graph names one of them (gradreg_plugins.onnx.complete fills them).
NAMESPACE_PREFIXES = ("onnx::", "onnx.ml::", "onnx.preview::", "onnx.preview.training::")

family = OpFamily("onnx", lazy_kernels={"numba": "gradreg_plugins.onnx.numba_kernels"},
                  deferred=NAMESPACE_PREFIXES, complete="gradreg_plugins.onnx.complete")
