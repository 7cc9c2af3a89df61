"""The onnx family's op table: one definition per ONNX op schema (see :mod:`schemas`), its
static shapes from ONNX's own inference (:mod:`shapes`; If, Loop and Scan from their bodies)."""
from __future__ import annotations

from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.schemas import all_schemas
from gradreg_plugins.onnx.shapes import onnx_shape, subgraph_shapes

for _schema in all_schemas():
    family.definitions.append(_schema.definition(shape=onnx_shape))
for _op_type in ("onnx::If", "onnx::Loop", "onnx::Scan"):
    family.shape(_op_type)(subgraph_shapes)
