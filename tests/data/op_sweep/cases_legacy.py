"""Sweep cases: the TensorArray ops of versions 1 (``TensorArray``, ``TensorArrayRead``, ...: a
ref-typed string handle) and 2 (``TensorArrayV2``, ``TensorArrayReadV2``, ...: a string handle),
which GraphDefs from before versions 16 and 26 hold. The family's graphs are built at producer
version 15 (sweep.PRODUCERS), where TensorFlow 2.21 still builds and runs them.

TensorFlow 2.21 cannot differentiate them: its rules (tensor_array_grad.py) wrap the handle in a
``tf.TensorArray``, which asks a version 3 gradient array (TensorArrayGradV3) of a string
handle and fails. Each case's twin is the same graph in version 3 ops: TensorFlow's values are its
run of the version 1/2 graph (checked against the twin's), its gradients the twin's."""
from __future__ import annotations

import tensorflow as tf
from sweep import R, case, f32, f64, family, inp, values

family("legacy")


class Array:
    """A TensorArray of one version ("", "V2" or "V3") built from raw ops, its flow threaded."""

    def __init__(self, version: str, dtype, size: int, **attrs):
        self.version, self.dtype = version, dtype
        created = getattr(R, f"TensorArray{version}")(size=size, dtype=dtype, **attrs)
        if version == "V3":
            self.handle, self.flow = created
        else:
            self.handle, self.flow = created, tf.constant(0.0)

    def _op(self, name: str, **inputs):
        return getattr(R, f"TensorArray{name}{self.version}")(handle=self.handle, **inputs)

    def write(self, index, value):
        self.flow = self._op("Write", index=index, value=value, flow_in=self.flow)
        return self

    def read(self, index):
        return self._op("Read", index=index, flow_in=self.flow, dtype=self.dtype)

    def scatter(self, indices, value):
        self.flow = self._op("Scatter", indices=indices, value=value, flow_in=self.flow)
        return self

    def gather(self, indices):
        return self._op("Gather", indices=indices, flow_in=self.flow, dtype=self.dtype)

    def split(self, value, lengths):
        self.flow = self._op("Split", value=value, lengths=tf.constant(lengths, tf.int64), flow_in=self.flow)
        return self

    def concat(self):
        return self._op("Concat", flow_in=self.flow, dtype=self.dtype)[0]


def _write_read(version):
    return lambda x, y: Array(version, f32, 2).write(0, x).write(1, y * y).read(1) * 2.0


def _read_twice(version):
    return lambda x: (lambda a: a.read(0) * a.read(0))(Array(version, f64, 1, clear_after_read=False).write(0, x))


def _scatter_gather(version):
    return lambda x: Array(version, f64, 4).scatter([3, 0, 1], x * 3.0).gather([1, 3])


def _unstack_stack(version):
    return lambda x: Array(version, f32, 3).scatter([0, 1, 2], x).gather([0, 1, 2]) * 2.0


def _split_concat(version):
    return lambda x: Array(version, f64, 2).split(x, [1, 3]).concat() * x


def _split_read(version):
    return lambda x: Array(version, f64, 2).split(tf.sin(x), [3, 1]).read(0)


NOTE = "TensorFlow 2.21 cannot differentiate version {} TensorArrays: the gradients are its twin's (version 3)"


def legacy(version: str, op: str, variant: str, make, covers: tuple, **inputs) -> None:
    """A case of the version's op ``op``, and its twin in version 3 ops."""
    case(f"TensorArray{op}{version}", variant, make(version), twin=make("V3"),
         note=NOTE.format(version[1:] or "1"), covers=tuple(f"TensorArray{c}{version}" for c in ("", *covers)),
         **inputs)


for v in ("", "V2"):
    legacy(v, "Write", "write_read", _write_read, ("Read",), x=inp(values("any", (3,)), f32),
           y=inp(values("any", (3,), 1), f32))
    legacy(v, "Read", "read_twice", _read_twice, ("Write",), x=inp(values("any", (2, 2)), f64))
    legacy(v, "Scatter", "scatter_gather_subset", _scatter_gather, ("Gather",), x=inp(values("any", (3, 2)), f64))
    legacy(v, "Gather", "unstack_stack", _unstack_stack, ("Scatter",), x=inp(values("any", (3, 2)), f32))
    legacy(v, "Concat", "split_concat", _split_concat, ("Split",), x=inp(values("any", (4, 2)), f64))
    legacy(v, "Split", "split_read", _split_read, ("Read",), x=inp(values("any", (4, 2)), f64))
