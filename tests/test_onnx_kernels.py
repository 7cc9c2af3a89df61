"""The onnx family's own NumPy kernels (where onnx.reference ignores attributes, is wrong, or has no
implementation) against onnxruntime: LSTM/GRU/RNN with every attribute onnxruntime supports,
GridSample in every mode, MaxRoiPool, LRN with more channels than batch rows, Pad with negative
pads, SequenceInsert at the end, AffineGrid, Conv whose filters repeat."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg_plugins.onnx.format import load_onnx  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def _compare(nodes, feeds, outputs, opset=22, input_types=None, rtol=1e-5, atol=1e-5):
    """Run a model of ``nodes`` in onnxruntime and in gradreg; outputs must agree. Returns gradreg's."""
    inputs = [helper.make_tensor_value_info(n, (input_types or {}).get(n, F), v.shape) for n, v in feeds.items()]
    draft = helper.make_model(helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info(o, F, None)
                                                                    for o in outputs]),
                              opset_imports=[helper.make_opsetid("", opset)])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    expected = ort.InferenceSession(draft.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, feeds)
    del draft.graph.output[:]
    draft.graph.output.extend(helper.make_tensor_value_info(o, F, e.shape) for o, e in zip(outputs, expected))
    got = gr.Session(load_onnx(draft)).run(outputs, feeds)
    for name, a, b in zip(outputs, got, expected):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=name)
    return got


RECURRENT = [
    ("LSTM", {}, None, False),
    ("LSTM", {"direction": "bidirectional"}, [4, 2, 3], True),
    ("LSTM", {"direction": "reverse", "clip": 0.5, "input_forget": 1}, [1, 4, 3], False),
    ("LSTM", {"activations": ["HardSigmoid", "LeakyRelu", "Affine"], "activation_alpha": [0.3, 0.1, 0.5],
              "activation_beta": [0.4, 0.2]}, None, False),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, [3, 4, 1], False),
    ("GRU", {"clip": 0.7, "direction": "reverse"}, None, False),
    ("GRU", {"activations": ["Sigmoid", "Relu"]}, None, False),
    ("RNN", {"direction": "bidirectional"}, [2, 4, 4], False),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [1.5], "activation_beta": [0.7]}, None, False),
    ("RNN", {"activations": ["Elu"], "activation_alpha": [0.5]}, None, False),
]


@pytest.mark.parametrize("kind, attrs, lengths, peepholes", RECURRENT,
                         ids=[f"{k}-{'-'.join(a) or 'default'}" for k, a, _, _ in RECURRENT])
def test_recurrent_ops_match_onnxruntime(kind, attrs, lengths, peepholes):
    steps, batch, features, hidden = 4, 3, 2, 3
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    feeds = {"X": RNG.normal(size=(steps, batch, features)),
             "W": RNG.normal(size=(directions, gates * hidden, features)) * 0.5,
             "R": RNG.normal(size=(directions, gates * hidden, hidden)) * 0.5,
             "B": RNG.normal(size=(directions, 2 * gates * hidden)) * 0.5,
             "H0": RNG.normal(size=(directions, batch, hidden))}
    names = ["X", "W", "R", "B", "", "H0"]
    if lengths is not None:
        feeds["L"] = np.array(lengths, np.int32)
        names[4] = "L"
    if kind == "LSTM":
        feeds["C0"] = RNG.normal(size=(directions, batch, hidden))
        names.append("C0")
        if peepholes:
            feeds["P"] = RNG.normal(size=(directions, 3 * hidden))
            names.append("P")
    feeds = {k: v.astype(np.float32) if k != "L" else v for k, v in feeds.items()}
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, hidden_size=hidden, **attrs)
    _compare([node], feeds, outputs, opset=14, input_types={"L": TensorProto.INT32})


GRID_CASES = [(mode, padding, align, rank) for mode in ("linear", "nearest", "cubic")
              for padding in ("zeros", "border", "reflection") for align in (0, 1) for rank in (4, 5)
              if not (mode == "cubic" and rank == 5)]


@pytest.mark.parametrize("mode, padding, align, rank", GRID_CASES)
def test_grid_sample_matches_onnxruntime(mode, padding, align, rank):
    dims = [2, 3, 4, 5] if rank == 4 else [1, 2, 3, 4, 3]
    k = rank - 2
    feeds = {"x": RNG.normal(size=dims).astype(np.float32),
             "g": RNG.uniform(-1.6, 1.6, size=[dims[0]] + [3] * k + [k]).astype(np.float32)}
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    _compare([node], feeds, ["y"])


def test_max_roi_pool_matches_onnxruntime():
    feeds = {"x": RNG.normal(size=(2, 3, 8, 7)).astype(np.float32),
             "r": np.array([[0, 1.2, 0.7, 5.5, 6.1], [1, 0, 0, 3, 2], [1, 4.6, 2.2, 9.9, 9.5], [0, 3, 3, 3, 3]],
                           np.float32)}
    node = helper.make_node("MaxRoiPool", ["x", "r"], ["y"], pooled_shape=[3, 2], spatial_scale=0.7)
    _compare([node], feeds, ["y"], opset=12)


def test_lrn_with_more_channels_than_batch_rows_matches_onnxruntime():
    feeds = {"x": RNG.normal(size=(1, 5, 2, 3)).astype(np.float32)}
    _compare([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.4, beta=0.6, bias=1.2)], feeds, ["y"])


def test_pad_with_negative_pads_matches_onnxruntime():
    feeds = {"x": RNG.normal(size=(3, 4)).astype(np.float32)}
    pads = helper.make_node("Constant", [], ["p"],
                            value=helper.make_tensor("p", TensorProto.INT64, [4], [1, -1, -1, 2]))
    _compare([pads, helper.make_node("Pad", ["x", "p"], ["y"])], feeds, ["y"])


def test_sequence_insert_at_the_end_matches_onnxruntime():
    feeds = {"x": RNG.normal(size=(3, 2)).astype(np.float32), "t": RNG.normal(size=(4, 2)).astype(np.float32)}
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=1),
             helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", TensorProto.INT64, [], [3])),
             helper.make_node("SequenceInsert", ["s", "t", "n"], ["u"]),
             helper.make_node("ConcatFromSequence", ["u"], ["y"], axis=0)]
    _compare(nodes, feeds, ["y"])


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_onnxruntime(align):
    feeds = {"theta": RNG.normal(size=(2, 2, 3)).astype(np.float32)}
    size = helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", TensorProto.INT64, [4], [2, 1, 3, 4]))
    _compare([size, helper.make_node("AffineGrid", ["theta", "s"], ["y"], align_corners=align)], feeds, ["y"], opset=20)


# (input shape, filter shape, attributes, output channels that repeat an earlier one's filter)
REPEATED_FILTERS = [
    ((1, 512, 13, 13), (1000, 512, 1, 1), {}, "all"),             # onnx's light SqueezeNet's conv10
    ((2, 3, 17, 19), (64, 3, 3, 3), {"pads": [1, 1, 1, 1]}, [5, 17, 40, 63]),
    ((1, 96, 14, 14), (130, 96, 3, 3), {"strides": [2, 2]}, [1, 64, 65, 100, 129]),
    ((3, 8, 50), (37, 8, 5), {"dilations": [2]}, [12, 36]),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs, repeats", REPEATED_FILTERS,
                         ids=["squeezenet-conv10", "first-layer", "strided-3x3", "1d-dilated"])
def test_conv_channels_of_repeated_filters_are_equal(x_shape, w_shape, attrs, repeats):
    """Channels whose filter and bias repeat an earlier channel's are that channel bit for bit
    (sgemm alone rounds some columns of a product apart), and all match onnxruntime."""
    m = w_shape[0]
    w = RNG.normal(scale=0.1, size=w_shape).astype(np.float32)
    b = RNG.normal(size=m).astype(np.float32)
    sources = {}
    for i, channel in enumerate(range(1, m) if repeats == "all" else repeats):
        sources[channel] = 0 if repeats == "all" else i % 3
        w[channel], b[channel] = w[sources[channel]], b[sources[channel]]
    feeds = {"x": RNG.normal(scale=100.0, size=x_shape).astype(np.float32), "w": w, "b": b}
    (y,) = _compare([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], feeds, ["y"], rtol=1e-4, atol=1e-2)
    for channel, source in sources.items():
        assert np.array_equal(y[:, channel], y[:, source]), (channel, source)


def test_distinct_filters_compares_whole_rows_bit_for_bit():
    from gradreg_plugins.onnx.kernels import distinct_filters
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(40, 9)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.7] = 0.0                      # pruned: first entries often agree
    rows[7], rows[30], rows[31] = rows[3], rows[3], rows[12]
    rows[20] = rows[21] = 0.0
    rows[22] = -0.0                                               # equal to 0.0, not the same bits
    rows[24] = rows[25] = np.arange(1, 10)
    rows[26] = rows[27] = np.arange(9, 0, -1)                     # the same sums as row 24, other rows
    distinct, index = distinct_filters(rows)
    assert np.array_equal(distinct[index].view(np.uint32), rows.view(np.uint32))
    groups = {}
    for i, row in enumerate(rows.view(np.uint32)):
        groups.setdefault(row.tobytes(), []).append(i)
    assert len(distinct) == len(groups)
    assert all(len({index[i] for i in members}) == 1 for members in groups.values())
    assert distinct_filters(rng.normal(size=(300, 5)).astype(np.float32)) is None


def test_conv_refuses_an_output_over_the_element_limit_before_multiplying():
    from gradreg.errors import ElementLimitError
    x = helper.make_tensor_value_info("x", F, [1, 2, 20, 20])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "m", [x],
        [helper.make_tensor_value_info("y", F, [1, 64, 20, 20])],
        initializer=[onnx.numpy_helper.from_array(np.ones((64, 2, 1, 1), np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 18)])
    session = gr.Session(load_onnx(model), max_elements=10_000)   # the input (800) is within it
    with pytest.raises(ElementLimitError, match=r"onnx::Conv.*25,600 elements"):
        session.run(["y"], {"x": np.ones((1, 2, 20, 20), np.float32)})


def test_conv_follows_input_sizes_that_change_between_runs():
    w = RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 1], auto_pad="SAME_UPPER")], "m",
        [helper.make_tensor_value_info("x", F, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", F, [1, 4, "a", "b"])],
        initializer=[onnx.numpy_helper.from_array(w, "w")]), opset_imports=[helper.make_opsetid("", 18)])
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session = gr.Session(load_onnx(model))
    for size in [(5, 5), (8, 6), (5, 5), (1, 9)]:
        x = RNG.normal(size=(1, 3) + size).astype(np.float32)
        (expected,) = reference.run(None, {"x": x})
        (got,) = session.run(["y"], {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(size))


@pytest.mark.parametrize("node, kernel, referee", [
    (helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 1, 0, 1]), [3, 3], "onnxruntime"),
    (helper.make_node("Conv", ["x", "w"], ["y"], dilations=[1, 2]), [1, 2], "onnxruntime"),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3]), None, "onnx.reference"),
    (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[1, 4]), None, "onnxruntime"),
])
def test_a_window_larger_than_the_padded_input_is_a_typed_error_naming_the_node(node, kernel, referee):
    """The referee refuses these too (onnxruntime gives MaxPool an empty output, onnx.reference
    gives Conv one; each refuses the others); NumPy's own message ("window shape cannot be larger
    than input array shape") named no sizes."""
    from gradreg.errors import ExecutionError
    initializer = [] if kernel is None else [onnx.numpy_helper.from_array(np.ones([1, 1] + kernel, np.float32), "w")]
    model = helper.make_model(helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", F, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", F, [1, 1, None, None])], initializer=initializer),
        opset_imports=[helper.make_opsetid("", 18)])
    x = np.ones((1, 1, 2, 2), np.float32)
    from onnx.reference import ReferenceEvaluator
    with pytest.raises(Exception):     # noqa: B017 (onnxruntime's and onnx.reference's own errors)
        if referee == "onnxruntime":
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        else:
            ReferenceEvaluator(model).run(None, {"x": x})
    with pytest.raises(ExecutionError, match=r"node 'y' \(op onnx::\w+Pool|node 'y' \(op onnx::Conv\): the window "
                                             r"\[\d, \d\] \(kernel .*\) is larger than the padded input \[2, \d\]"):
        gr.Session(load_onnx(model)).run(["y"], {"x": x})
