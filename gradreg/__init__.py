"""gradreg: symbolic differentiation of TensorFlow-compatible computation graphs.

    import numpy as np
    import gradreg as gr

    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float32, [None, 3], name="x")
        w = gr.constant(np.ones((3, 2), np.float32), name="w")
        loss = gr.reduce_sum(gr.tanh(gr.matmul(x, w)))
        (dw,) = gr.gradients(loss, [w])
    print(gr.Session(g).run(dw, {x: np.ones((4, 3), np.float32)}))

Builders (``gr.matmul``, ``gr.reduce_sum``, ...) come from the op families registered
as plugins; ``gr.raw_ops.<OpType>`` builds any defined op type directly.
"""
from __future__ import annotations

import builtins as _builtins
import importlib as _importlib
import importlib.util as _importlib_util
from typing import TYPE_CHECKING
from typing import Any as _Any

from gradreg import compat, config, errors
from gradreg.build.builders import api_function as _api_function
from gradreg.build.builders import apply_op, constant, convert_to_tensor
from gradreg.build.builders import make_builder as _make_builder
from gradreg.compat import declared_namespace as _declared_namespace
from gradreg.compat import namespace as _namespace
from gradreg.deadline import time_limit
from gradreg.errors import GradregError
from gradreg.formats import load_graph, save_graph, write_graph
from gradreg.model import dtypes
from gradreg.model.dtypes import (
    DType,
    as_dtype,
    bfloat16,
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    qint8,
    qint16,
    qint32,
    quint8,
    quint16,
    resource,
    string,
    uint8,
    uint16,
    uint32,
    uint64,
    variant,
)
from gradreg.model.graph import Graph, Operation, Tensor, get_default_graph, import_graph_def, reset_default_graph
from gradreg.model.indexed_slices import IndexedSlices, IndexedSlicesValue
from gradreg.model.shapes import TensorShape
from gradreg.registry import get_registry as _get_registry
from gradreg.registry.hookspecs import hookimpl

if TYPE_CHECKING:   # imported on first use (below, _LAZY): the command line does not pay for them
    from gradreg import training as train
    from gradreg.autodiff.custom_gradient import (
        custom_gradient,
        grad_pass_through,
        hessian_vector_product,
        hessians,
        recompute_grad,
    )
    from gradreg.autodiff.gradients import (
        AggregationMethod,
        NoGradient,
        NotDifferentiable,
        RegisterGradient,
        UnconnectedGradients,
        gradients,
    )
    from gradreg.build.control_flow import cond, group, while_loop
    from gradreg.build.functions import function
    from gradreg.formats.gradient_saved_model import save_gradient_saved_model
    from gradreg.formats.saved_model_loader import LoadedSavedModel, load_saved_model
    from gradreg.formats.signature_graph import SignatureGraph, signature_gradients, signature_graph
    from gradreg.model import nest
    from gradreg.runtime.session import Session
    from gradreg.training import (
        AUTO_REUSE,
        GraphKeys,
        Variable,
        constant_initializer,
        get_variable,
        get_variable_scope,
        global_variables,
        global_variables_initializer,
        glorot_normal_initializer,
        glorot_uniform_initializer,
        ones_initializer,
        random_normal_initializer,
        random_uniform_initializer,
        trainable_variables,
        truncated_normal_initializer,
        variables_initializer,
        variance_scaling_initializer,
        zeros_initializer,
    )
    from gradreg.training.variable_scope import variable_scope  # the function, not its module

    __version__: str   # read from the installed metadata on first use (__getattr__)

# Names whose modules load on first use, as (module, attribute; None for the module itself).
# Differentiation, sessions, control flow (optree), training and SavedModels stay out of a
# process that only reads a graph (`gradreg inspect`); tests/test_api_surface.py checks this
# table against the imports above.
_LAZY: dict[str, tuple[str, str | None]] = {
    **{name: ("gradreg.autodiff.custom_gradient", name) for name in (
        "custom_gradient", "grad_pass_through", "hessian_vector_product", "hessians", "recompute_grad")},
    **{name: ("gradreg.autodiff.gradients", name) for name in (
        "AggregationMethod", "NoGradient", "NotDifferentiable", "RegisterGradient", "UnconnectedGradients",
        "gradients")},
    **{name: ("gradreg.build.control_flow", name) for name in ("cond", "group", "while_loop")},
    "tuple": ("gradreg.build.control_flow", "tuple_"),   # TensorFlow's tf.tuple
    "function": ("gradreg.build.functions", "function"),
    "LoadedSavedModel": ("gradreg.formats.saved_model_loader", "LoadedSavedModel"),
    "load_saved_model": ("gradreg.formats.saved_model_loader", "load_saved_model"),
    "save_gradient_saved_model": ("gradreg.formats.gradient_saved_model", "save_gradient_saved_model"),
    **{name: ("gradreg.formats.signature_graph", name) for name in (
        "SignatureGraph", "signature_gradients", "signature_graph")},
    "nest": ("gradreg.model.nest", None),
    "Session": ("gradreg.runtime.session", "Session"),
    "train": ("gradreg.training", None),   # TensorFlow's tf.train
    "variable_scope": ("gradreg.training.variable_scope", "variable_scope"),
    **{name: ("gradreg.training", name) for name in (
        "AUTO_REUSE", "GraphKeys", "Variable", "constant_initializer", "get_variable", "get_variable_scope",
        "global_variables", "global_variables_initializer", "glorot_normal_initializer",
        "glorot_uniform_initializer", "ones_initializer", "random_normal_initializer",
        "random_uniform_initializer", "trainable_variables", "truncated_normal_initializer",
        "variables_initializer", "variance_scaling_initializer", "zeros_initializer")},
}

__all__ = ["add_to_collection", "AggregationMethod", "apply_op", "as_dtype", "AUTO_REUSE",
    "bfloat16", "bool", "bool_", "compat", "complex128", "complex64", "cond", "config", "constant",
    "constant_initializer", "control_dependencies", "convert_to_tensor", "custom_gradient", "DType", "dtypes",
    "errors", "executing_eagerly", "float16", "float32", "float64", "function", "get_collection",
    "get_collection_ref", "get_default_graph", "get_variable", "get_variable_scope", "global_variables",
    "global_variables_initializer", "glorot_normal_initializer", "glorot_uniform_initializer",
    "grad_pass_through", "gradients", "GradregError", "Graph", "GraphKeys", "group", "half",
    "hessian_vector_product", "hessians", "hookimpl", "image", "import_graph_def", "IndexedSlices",
    "IndexedSlicesValue", "int16", "int32", "int64", "int8", "io", "is_tensor", "linalg", "load_graph",
    "load_onnx", "load_saved_model", "LoadedSavedModel", "math", "name_scope", "nest", "newaxis", "nn",
    "NoGradient", "NotDifferentiable", "ones_initializer", "Operation", "qint16", "qint32", "qint8", "quint16",
    "quint8", "random", "random_normal_initializer", "random_uniform_initializer", "raw_ops", "recompute_grad",
    "RegisterGradient", "reset_default_graph", "resource", "save_gradient_saved_model", "save_graph",
    "save_onnx", "Session", "set_random_seed", "SignatureGraph", "signature_gradients", "signature_graph", "string",
    "Tensor", "TensorShape", "time_limit", "train", "trainable_variables",
    "truncated_normal_initializer", "tuple", "uint16", "uint32", "uint64", "uint8", "UnconnectedGradients",
    "Variable", "variable_scope", "variables_initializer", "variance_scaling_initializer", "variant",
    "__version__", "while_loop", "write_graph", "zeros_initializer"]

bool = bool_  # noqa: A001  (TensorFlow spells it gradreg.bool)
newaxis = None   # x[:, gradreg.newaxis] adds an axis, as numpy.newaxis

# TensorFlow's namespaces (gradreg.compat): modules of the builders the families declare there.
nn = _namespace("nn")
math = _namespace("math")
linalg = _namespace("linalg")
image = _namespace("image")
io = _namespace("io", {"write_graph": write_graph})



def _version() -> str:
    """One source of truth: the version in pyproject.toml, as installed (read when asked for:
    importing importlib.metadata costs ~40 ms)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("gradreg")
    except importlib.metadata.PackageNotFoundError:   # a source tree on sys.path that was never installed
        return "0+unknown"


def set_random_seed(seed: int | None) -> None:
    """The default graph's seed: random ops without a seed of their own derive theirs from it
    (TensorFlow's tf.compat.v1.set_random_seed; ``gradreg.random.set_seed`` too)."""
    get_default_graph().seed = seed


random = _namespace("random", {"set_seed": set_random_seed})


def executing_eagerly() -> _builtins.bool:
    """False: gradreg builds graphs (for code that asks TensorFlow's tf.executing_eagerly())."""
    return False


def is_tensor(value: _Any) -> _builtins.bool:
    """Whether ``value`` is a graph value: a Tensor, an IndexedSlices, or an object that converts
    itself (a Variable)."""
    return isinstance(value, (Tensor, IndexedSlices)) or hasattr(value, "_gradreg_tensor_")


def get_collection(key: str, scope: str | None = None) -> list[_Any]:
    """``get_default_graph().get_collection(key, scope)``."""
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key: str) -> list[_Any]:
    """``get_default_graph().get_collection_ref(key)``: the list itself, to modify."""
    return get_default_graph().get_collection_ref(key)


def add_to_collection(name: str, value: _Any) -> None:
    """``get_default_graph().add_to_collection(name, value)``."""
    get_default_graph().add_to_collection(name, value)


def load_onnx(source: _Any, *, base_dir: _Any = None) -> Graph:
    """An ONNX model (a path, bytes, or an onnx.ModelProto) as a Graph of ``onnx::`` ops:
    ``load_graph(source, format="onnx", base_dir=base_dir)`` (the format the onnx op family
    registers; it needs the ``onnx`` extra, ``pip install "gradreg[onnx]"``). External data is
    read from the file's directory; bytes or a ModelProto whose tensors are in external data
    need ``base_dir`` (the model's directory), else ExternalDataError names the tensor."""
    if hasattr(source, "SerializeToString") and hasattr(source, "opset_import"):   # a ModelProto
        source = source.SerializeToString()
    return load_graph(source, format="onnx", base_dir=base_dir)


def save_onnx(graph: Graph, path: _Any, outputs: _Any = None, *, opset: int | None = None,
              flat: _builtins.bool = False) -> None:
    """Write ``graph`` as an ONNX model computing ``outputs`` ({ONNX output name: tensor or
    tensor name}; default: a loaded model's own outputs): ``save_graph(graph, path, "onnx",
    outputs=...)``. ``opset`` (17 up to the onnx family's, default the family's) writes an older
    ai.onnx opset. Each gradient rule's nodes are one call of a model-local function
    (``LayerNormalizationGrad``) unless ``flat``. The model passes
    ``onnx.checker.check_model(full_check=True)``."""
    options: dict[str, _Any] = {} if opset is None else {"opset": int(opset)}
    if flat:
        options["flat"] = True
    if outputs is None:
        save_graph(graph, path, "onnx", **options)
    else:
        save_graph(graph, path, "onnx", outputs=dict(outputs), **options)


def name_scope(name: str | None):
    """``get_default_graph().name_scope(name)``."""
    return get_default_graph().name_scope(name)


def control_dependencies(control_inputs):
    """``get_default_graph().control_dependencies(control_inputs)``."""
    return get_default_graph().control_dependencies(control_inputs)


class _RawOps:
    """``gradreg.raw_ops.<OpType>(...)``: a builder for every defined op type."""

    def __getattr__(self, op_type: str):
        definition = _get_registry().op_definition(op_type)
        if definition is None:
            raise AttributeError(f"no installed plugin defines op type '{op_type}'")
        builder = _make_builder(definition)
        setattr(self, op_type, builder)
        return builder

    def __dir__(self):
        return sorted(_get_registry().ops.keys())


raw_ops = _RawOps()


def __getattr__(name: str) -> _Any:
    """The names of _LAZY, then submodules, then builders named in the op table
    (``gradreg.matmul``, resolved through the registry)."""
    if name == "__version__":
        version = globals()[name] = _version()
        return version
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _LAZY:
        module_name, attribute = _LAZY[name]
        module = _importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        globals()[name] = value
        return value
    if _importlib_util.find_spec(f"{__name__}.{name}") is not None:   # a submodule, not a builder
        return _importlib.import_module(f"{__name__}.{name}")
    try:
        fn = _api_function(name)
    except AttributeError:
        found = _declared_namespace(name)       # a namespace a plugin declares (api="signal.fft")
        if found is not None:
            return found
        raise AttributeError(f"module 'gradreg' has no attribute '{name}'") from None
    globals()[name] = fn
    return fn


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {key.split(".", 1)[0] for key in _get_registry().api})
