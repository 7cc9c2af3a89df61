"""Python operators on :class:`~gradreg.model.graph.Tensor`: ``x + y``, ``x @ w``, ``x[1:]``, ...

The model layer defines Tensor without arithmetic; this module installs the operators
on the class when the build layer is imported (as TensorFlow's math_ops does), each
building its op through the builder of that name (``add``, ``matmul``, ...), which the
op families provide.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradreg.build.builders import api_function, op_scope
from gradreg.model.graph import Tensor


def _binary(builder: str, scope: str | None) -> Callable[[Tensor, Any], Any]:
    if scope is None:
        def operator(self: Tensor, other: Any) -> Any:
            return api_function(builder)(self, other)
    else:
        def operator(self: Tensor, other: Any) -> Any:
            if isinstance(other, Tensor):
                # No Const to put inside the scope: the builder's node takes the scope's name
                # directly (the same unique name, one name scope fewer per operator).
                return api_function(builder)(self, other, name=scope)
            with op_scope(None, scope, (self, other)) as name:
                return api_function(builder)(self, other, name=name)
    operator.__name__ = builder
    return operator


def _reflected(builder: str, scope: str) -> Callable[[Tensor, Any], Any]:
    def operator(self: Tensor, other: Any) -> Any:
        with op_scope(None, scope, (self, other)) as name:
            return api_function(builder)(other, self, name=name)
    operator.__name__ = f"r{builder}"
    return operator


def _unary(builder: str) -> Callable[[Tensor], Any]:
    def operator(self: Tensor) -> Any:
        return api_function(builder)(self)
    operator.__name__ = builder
    return operator


# Python's operator method -> the builder it calls (reflected: with the operands swapped) and,
# as in TensorFlow's math_ops, the name scope the node and its Consts take ("sub", "sub/x");
# None: the builder's own default name (TensorFlow calls the op's builder directly: "Less").
BINARY = {
    "__add__": ("add", "add"), "__sub__": ("subtract", "sub"), "__mul__": ("multiply", "mul"),
    "__truediv__": ("truediv", "truediv"), "__floordiv__": ("floordiv", "floordiv"),
    "__mod__": ("floormod", "mod"), "__pow__": ("pow", "pow"), "__matmul__": ("matmul", "matmul"),
    "__lt__": ("less", None), "__le__": ("less_equal", None), "__gt__": ("greater", None),
    "__ge__": ("greater_equal", None), "__and__": ("logical_and", "and"), "__or__": ("logical_or", "or"),
    "__getitem__": ("_slice_helper", None),
}
REFLECTED = {
    "__radd__": ("add", "add"), "__rsub__": ("subtract", "sub"), "__rmul__": ("multiply", "mul"),
    "__rtruediv__": ("truediv", "truediv"), "__rfloordiv__": ("floordiv", "floordiv"),
    "__rmod__": ("floormod", "mod"), "__rpow__": ("pow", "pow"), "__rmatmul__": ("matmul", "matmul"),
}
UNARY = {"__neg__": "negative", "__abs__": "abs", "__invert__": "logical_not"}


def install() -> None:
    """Set the operator methods on Tensor (idempotent)."""
    for method, (builder, scope) in BINARY.items():
        setattr(Tensor, method, _binary(builder, scope))
    for method, (builder, scope) in REFLECTED.items():
        setattr(Tensor, method, _reflected(builder, scope))
    for method, name in UNARY.items():
        setattr(Tensor, method, _unary(name))


install()
