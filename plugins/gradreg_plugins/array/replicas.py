"""TPU collectives on one replica: CrossReplicaSum and AllToAll — definitions, shape functions,
kernels and TensorFlow's rules (tpu_ops.py); and _EagerConst, the op eager TensorFlow makes
constants with.

gradreg runs a graph as one replica (replica 0), as a TPU program's single-core run would: a sum
over a group of one replica is its input, and an all-to-all among one replica (split_count 1)
gives it back whole. A group_assignment that puts replica 0 in a larger group (or an
AllToAll asking for more splits) asks for other replicas' values, which a single interpreter does
not have: an ExecutionError names the node. TensorFlow has no CPU kernel for either op.

The gradient of a cross-replica sum is the cross-replica sum of the gradients; that of an
all-to-all, the all-to-all with split and concat dimensions exchanged (TensorFlow's rules).
_EagerConst's rule raises, as TensorFlow's does: the op never meets gradients in TensorFlow.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op
from gradreg.errors import GradientError, describe_node
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import TensorShape
from gradreg.registry.kernels import IDENTITY
from gradreg_plugins.array import family

op = family.op

op("CrossReplicaSum", inputs=["input: T", "group_assignment: int32"], outputs=["output: T"],
   attrs=["T: {float16, bfloat16, float32, float64, int32, uint32}"], shape=sf.unchanged, stateful=True)


def _all_to_all_shape(ctx):
    shape = ctx.input_shape(0)
    if shape.rank is None:
        return shape
    count, split, concat = ctx.attr("split_count"), ctx.attr("split_dimension"), ctx.attr("concat_dimension")
    for name, axis in (("split_dimension", split), ("concat_dimension", concat)):
        if not 0 <= axis < shape.rank:
            raise ctx.error(f"{name} {axis} is out of range for an input of rank {shape.rank}")
    dims = list(shape.dims)
    if dims[split] is not None:
        if dims[split] % count:
            raise ctx.error(f"input dimension {split} ({dims[split]}) must be divisible by split_count {count}")
        dims[split] //= count
    if dims[concat] is not None:
        dims[concat] *= count
    return TensorShape(dims)


op("AllToAll", inputs=["input: T", "group_assignment: int32"], outputs=["output: T"],
   attrs=["T: {float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, "
          "qint16, quint16, uint16, complex128, float16, uint32, uint64, bool}", "concat_dimension: int",
          "split_dimension: int", "split_count: int"], shape=_all_to_all_shape, stateful=True)
op("_EagerConst", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"], shape=sf.unchanged)


def _group_of_replica_zero(op, group_assignment) -> int:
    """The size of replica 0's group (the whole, one-replica computation when unassigned)."""
    groups = np.asarray(group_assignment)
    if groups.size == 0:
        return 1
    if groups.ndim != 2:
        raise ValueError(f"group_assignment must be a matrix [groups, replicas per group], got shape "
                         f"{list(groups.shape)}")
    rows = [row for row in groups.tolist() if 0 in row]
    if not rows:
        raise ValueError(f"group_assignment {groups.tolist()} does not assign replica 0 (gradreg's only replica)")
    return len(rows[0])


def _single_replica(op, group_assignment, count: int | None = None) -> None:
    size = _group_of_replica_zero(op, group_assignment)
    if size != 1 or (count is not None and count != 1):
        wanted = max(size, count or 1)
        raise ValueError(f"{op.type} among {wanted} replicas needs their values; gradreg runs one replica "
                         f"(group_assignment {np.asarray(group_assignment).tolist()}"
                         f"{'' if count is None else f', split_count {count}'})")


@family.kernel("CrossReplicaSum")
def _cross_replica_sum(op, ctx):
    def total(x, group_assignment):
        _single_replica(op, group_assignment)
        return x
    return total


@family.kernel("AllToAll")
def _all_to_all(op, ctx):
    count, split, concat = op.get_attr("split_count"), op.get_attr("split_dimension"), op.get_attr("concat_dimension")

    def exchange(x, group_assignment):
        for name, axis in (("split_dimension", split), ("concat_dimension", concat)):
            if not 0 <= axis < np.ndim(x):
                raise ValueError(f"{name} {axis} is out of range for an input of rank {np.ndim(x)}")
        if np.shape(x)[split] % count:
            raise ValueError(f"input dimension {split} ({np.shape(x)[split]}) must be divisible by split_count "
                             f"{count}")
        _single_replica(op, group_assignment, count)
        return x
    return exchange


family.kernel("_EagerConst")(lambda op, ctx: IDENTITY)


@family.gradient("CrossReplicaSum")
def _cross_replica_sum_grad(op, grad):
    return apply_op("CrossReplicaSum", rules.dense(grad), op.inputs[1]), None


@family.gradient("AllToAll")
def _all_to_all_grad(op, grad):
    return apply_op("AllToAll", rules.dense(grad), op.inputs[1], concat_dimension=op.get_attr("split_dimension"),
                    split_dimension=op.get_attr("concat_dimension"), split_count=op.get_attr("split_count")), None


@family.gradient("_EagerConst")
def _eager_const_grad(op, grad):
    raise GradientError(f"{describe_node(op.name, op.type)}: _EagerConst should never meet gradients (TensorFlow's "
                        f"rule raises too): it is how eager TensorFlow makes constants")
