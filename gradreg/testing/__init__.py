"""Gradient checking: the symbolic Jacobian against central differences (TensorFlow's v1
``tf.test.compute_gradient``)::

    x = gradreg.placeholder(gradreg.float64, [2, 3])
    y = gradreg.tanh(x)
    theoretical, numerical = gradreg.testing.compute_gradient(x, [2, 3], y, [2, 3])
    assert gradreg.testing.compute_gradient_error(x, [2, 3], y, [2, 3]) < 1e-6

Jacobians are shaped (x size, y size): entry [i, j] is d y_j / d x_i. The checker itself
is gradreg.autodiff.checker; this facade runs it in a Session.

A whole plugin package is checked with :func:`check_plugin` (gradreg.testing.plugin_check:
kernels, shape functions, first- and second-order gradients, NotDifferentiable claims, GraphDef
and ONNX round trips, TensorFlow's and onnxruntime's values), from pytest with
``pytest --gradreg-check PACKAGE`` and from the command line with ``gradreg plugins --check PACKAGE``::

    report = gradreg.testing.check_plugin("gradreg-swish")
    assert report.ok, "\n".join(str(f) for f in report.failures)
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gradreg.autodiff import checker
from gradreg.build.builders import graph_of
from gradreg.model.graph import Tensor
from gradreg.runtime.session import Session
from gradreg.testing.plugin_check import check_op, check_plugin, plugins_of, targets
from gradreg.testing.report import Failure, OpReport, PluginReport

__all__ = ["Failure", "OpReport", "PluginReport", "check_op", "check_plugin", "compute_gradient",
           "compute_gradient_error", "plugins_of", "targets"]


def compute_gradient(x: Tensor | Sequence[Tensor], x_shape: Any, y: Tensor, y_shape: Sequence[int],
                     x_init_value: Any = None, delta: float = 1e-3, extra_feed_dict: dict[Any, Any] | None = None,
                     session: Session | None = None) -> Any:
    """(theoretical, numerical) Jacobians of ``y`` w.r.t. ``x``; a list of pairs if ``x`` is a list.

    ``x`` tensors are fed with ``x_init_value`` (default: uniform random in [-1, 1)); other
    placeholders come from ``extra_feed_dict``; ``session`` defaults to a new Session of y's graph.
    """
    session = session or Session(graph_of(y))
    return checker.compute_gradient(x, x_shape, y, y_shape, session, x_init_value, delta, extra_feed_dict)


def compute_gradient_error(x: Tensor | Sequence[Tensor], x_shape: Any, y: Tensor, y_shape: Sequence[int],
                           x_init_value: Any = None, delta: float = 1e-3, extra_feed_dict: dict[Any, Any] | None = None,
                           session: Session | None = None) -> float:
    """The largest absolute difference between the theoretical and numerical Jacobians."""
    session = session or Session(graph_of(y))
    return checker.compute_gradient_error(x, x_shape, y, y_shape, session, x_init_value, delta, extra_feed_dict)
