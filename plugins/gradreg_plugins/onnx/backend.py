"""gradreg as an ONNX backend (``onnx.backend.base.Backend``), for onnx's conformance suite.

    >>> import gradreg_plugins.onnx.backend as backend
    >>> rep = backend.prepare(model)                 # a ModelProto
    >>> rep.run([x])                                 # outputs, by position and by name
    >>> backend.run_node(node, [a, b])               # one NodeProto on its own

onnx's harness runs it (about two minutes for the 1,884 node tests on one core)::

    import onnx.backend.test, gradreg_plugins.onnx.backend
    globals().update(onnx.backend.test.BackendTest(gradreg_plugins.onnx.backend, __name__).test_cases)

This module is the name onnx's harness is given (it was ``gradreg.onnx_backend``, which the
core cannot hold: gradreg/ imports no plugin). A model is loaded with
:func:`gradreg_plugins.onnx.importer.model_to_graph` (checked, brought to the
onnx family's opset) and run by a gradreg Session; values cross the boundary in onnx's forms
(ml_dtypes.bfloat16, str) and gradreg's (bfloat16 held in float32, bytes).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from gradreg.errors import FeedError, GraphError
from gradreg.model import dtypes
from gradreg.runtime.session import Session
from gradreg_plugins.onnx.importer import model_info, model_to_graph
from gradreg_plugins.onnx.nodes import from_onnx_value, to_onnx_array
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS


class GradregRep(BackendRep):
    """A loaded model and the Session that runs it."""

    def __init__(self, graph, backend: str | None = None):
        self.graph = graph
        info = model_info(graph)
        if info is None:
            raise GraphError("the graph was not loaded from an ONNX model")
        self.source = info.source
        self.inputs = list(info.inputs)
        # what a list of inputs feeds, in order: the inputs no initializer provides (as
        # onnxruntime does; an IR-3 model lists its weights among its inputs too)
        self.required = [(name, t) for name, t in self.inputs if name not in info.defaulted]
        self.outputs = list(info.outputs)
        self.session = Session(graph, backend=backend)

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """Outputs for ``inputs``: a dict by input name (initializers listed as inputs may be
        overridden), or a list feeding the inputs no initializer provides, in order (a list as
        long as every declared input feeds them all)."""
        if isinstance(inputs, dict):
            pairs = [(t, inputs[name]) for name, t in self.inputs if name in inputs]
        else:
            values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            order = self.inputs if len(values) == len(self.inputs) > len(self.required) else self.required
            if len(values) > len(order):
                raise FeedError(f"{self.source}: {len(values)} inputs given; the model takes {len(self.required)} "
                                f"({', '.join(name for name, _ in self.required)})")
            pairs = list(zip([t for _, t in order], values))
        feeds = {t: to_gradreg(v, t.dtype) for t, v in pairs}
        fetched = self.session.run([t for _, t in self.outputs], feeds)
        values = [to_onnx(v, t.dtype) for (_, t), v in zip(self.outputs, fetched)]
        return namedtupledict("Outputs", [name for name, _ in self.outputs])(*values)


def to_gradreg(value: Any, dtype) -> Any:
    """An onnx-side value (array, list for a sequence, None for an empty optional) as gradreg holds it."""
    if isinstance(value, list):
        return [to_gradreg(v, None) for v in value]
    if isinstance(value, dict) or value is None:
        return value
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    if array.dtype.kind in "OU":
        return from_onnx_value(array.astype(object), dtypes.string)
    return array


def to_onnx(value: Any, dtype) -> Any:
    """A gradreg value as onnx's harness expects it (0-d arrays, not scalars)."""
    if isinstance(value, list):
        return [to_onnx(v, None) for v in value]
    if value is None or isinstance(value, dict):
        return value
    array = np.asarray(value)
    if array.dtype.kind == "S":   # a 0-d string fetched as a bytes scalar
        array = array.astype(object)
    if dtype is not None and dtype.kind not in "v":
        return to_onnx_array(array, dtype)
    return to_onnx_array(array)


class GradregBackend(Backend):
    """onnx.backend.base.Backend running models with gradreg."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> GradregRep:
        return GradregRep(model_to_graph(model, "<model>"), kwargs.get("backend"))

    @classmethod
    def run_node(cls, node, inputs: Sequence[Any], device: str = "CPU",
                 outputs_info: Sequence[tuple] | None = None, **kwargs: Any) -> tuple:
        """Run one NodeProto on ``inputs`` (arrays for its non-empty inputs, in order)."""
        opset = kwargs.get("opset_version", OPSET_VERSIONS[""])
        values = list(inputs)
        graph_inputs = []
        for name, value in zip([n for n in node.input if n], values):
            array = np.asarray(value)
            graph_inputs.append(helper.make_tensor_value_info(name, _element_type(array), array.shape))
        graph_outputs = []
        for i, name in enumerate(o for o in node.output if o):
            if outputs_info is not None and i < len(outputs_info):
                dtype, shape = outputs_info[i]
                graph_outputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
                    np.dtype(dtype)), shape))
            else:
                graph_outputs.append(helper.make_empty_tensor_value_info(name))
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        domains = {node.domain or ""}
        opsets = [helper.make_opsetid(d, opset if d == "" else OPSET_VERSIONS.get(d, 1)) for d in domains]
        if "" not in domains:
            opsets.append(helper.make_opsetid("", opset))
        model = helper.make_model(graph, opset_imports=opsets)
        if outputs_info is None:   # graph outputs need types: onnx's inference gives them
            model = onnx.shape_inference.infer_shapes(model)
        return cls.prepare(model, device).run(values)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


def _element_type(array: np.ndarray) -> int:
    if array.dtype.kind in "OU":
        return onnx.TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(array.dtype)


prepare = GradregBackend.prepare
run_node = GradregBackend.run_node
run_model = GradregBackend.run_model
supports_device = GradregBackend.supports_device
is_compatible = GradregBackend.is_compatible

__all__ = ["GradregBackend", "GradregRep", "prepare", "run_node", "run_model", "supports_device", "is_compatible"]
