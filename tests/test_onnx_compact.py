"""The exporter's compaction of written models (gradreg_plugins.onnx.compact): folding what small
constants determine, writing repeated nodes and constants once, dropping Identities, and leaving
a model's own initializers, graph outputs and large results alone. onnxruntime is the referee."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from gradreg_plugins.onnx.compact import FOLD_LIMIT, compact  # noqa: E402


def model_of(nodes, initializers=(), outputs=("y",), opset=18):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3] if o == "y" else [])
                               for o in outputs],
                              initializer=[numpy_helper.from_array(v, n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def compacted(model, keep=()):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    compact(copy, keep)
    onnx.checker.check_model(copy, full_check=True)
    return copy


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2


def test_a_function_bodys_constants_fold_into_initializers_of_the_type_they_are_cast_like():
    # Gelu's opset-19 body in small: Constant, CastLike to x's type, Sqrt of it, then the data path
    nodes = [helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np.float64))),
             helper.make_node("CastLike", ["two", "x"], ["two_f"]),
             helper.make_node("Sqrt", ["two_f"], ["root"]),
             helper.make_node("Div", ["x", "root"], ["y"])]
    model = model_of(nodes)
    small = compacted(model)
    assert [n.op_type for n in small.graph.node] == ["Div"]
    root = next(t for t in small.graph.initializer if t.name == "root")
    assert root.data_type == TensorProto.FLOAT and numpy_helper.to_array(root) == pytest.approx(np.sqrt(2))
    np.testing.assert_array_equal(run(small, X)[0], run(model, X)[0])


def test_repeated_nodes_equal_constants_and_identities_are_written_once():
    nodes = [helper.make_node("Mul", ["x", "a"], ["p"]), helper.make_node("Mul", ["x", "b"], ["q"]),
             helper.make_node("Identity", ["q"], ["q2"]), helper.make_node("Add", ["p", "q2"], ["y"])]
    model = model_of(nodes, [("a", np.float32(3)), ("b", np.float32(3))])
    small = compacted(model)
    assert [n.op_type for n in small.graph.node] == ["Mul", "Add"]
    assert list(small.graph.node[1].input) == ["p", "p"] and [t.name for t in small.graph.initializer] == ["a"]
    np.testing.assert_array_equal(run(small, X)[0], 6 * X)


def test_a_models_own_initializers_graph_outputs_random_ops_and_large_results_are_left_alone():
    big = np.array([2, FOLD_LIMIT], np.int64)
    one = numpy_helper.from_array(np.ones(1, np.float32))
    nodes = [helper.make_node("Neg", ["w"], ["minus_w"]),                       # w is the model's: kept
             helper.make_node("Neg", ["c"], ["z"]),                            # a graph output: kept
             helper.make_node("ConstantOfShape", ["big"], ["ones"], value=one),
             helper.make_node("ReduceSum", ["ones"], ["total"], keepdims=0),
             helper.make_node("RandomUniform", [], ["r"], shape=[2, 3]),
             helper.make_node("RandomUniform", [], ["r2"], shape=[2, 3]),
             helper.make_node("Sum", ["x", "minus_w", "total", "r", "r2"], ["y"])]
    model = model_of(nodes, [("w", np.ones(3, np.float32)), ("c", np.float32(1)), ("big", big)], outputs=("y", "z"))
    small = compacted(model, keep={"w"})
    assert [n.op_type for n in small.graph.node] == [n.op_type for n in nodes]
    y, z = run(small, X)
    assert z == -1 and np.all((y - (X - 1 + 2 * FOLD_LIMIT) >= 0) & (y - (X - 1 + 2 * FOLD_LIMIT) < 2))


def test_reshape_and_transpose_chains_are_one_node_and_what_they_leave_unread_is_dropped():
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["f"]),
             helper.make_node("Reshape", ["f", "back"], ["r"]),            # x's shape again: one Reshape
             helper.make_node("Reshape", ["x", "column"], ["f2"]),
             helper.make_node("Reshape", ["f2", "copy"], ["r2"]),           # a 0 copies f2's dim: kept as written
             helper.make_node("Transpose", ["r", ], ["t"], perm=[1, 0]),
             helper.make_node("Transpose", ["t"], ["t2"], perm=[1, 0]),    # composed: the identity permutation
             helper.make_node("Sum", ["t2", "r2"], ["s"]),
             helper.make_node("Reshape", ["s", "back"], ["y"])]
    model = model_of(nodes, [("flat", np.array([6], np.int64)), ("back", np.array([2, 3], np.int64)),
                             ("column", np.array([2, 3, 1], np.int64)), ("copy", np.array([0, -1], np.int64))])
    small = compacted(model)
    assert [n.op_type for n in small.graph.node] == ["Reshape", "Reshape", "Reshape", "Sum", "Reshape"]
    assert list(small.graph.node[0].input) == ["x", "back"] and list(small.graph.node[3].input) == ["r", "r2"]
    np.testing.assert_array_equal(run(small, X)[0], run(model, X)[0])
