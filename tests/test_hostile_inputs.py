"""Regression tests for the findings of issue 16 (hostile graphs and feeds): each is a typed
GradregError whose one-line message names the file, node and attr — on both backends and through
the command line — or a correct result; never an internal error, a hang or a silent wrong value."""
from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
from corpus import ROOT
from fuzz import mutate
from fuzz.feeds import npy_with_header, zip_bomb
from google.protobuf import text_format

import gradreg as gr
from gradreg import cli, config, errors
from gradreg.formats.arrays import read_npy, read_npz
from gradreg.proto import graph_pb2

BACKENDS = ["numpy", "numba"]


def _gd(text: str) -> graph_pb2.GraphDef:
    return text_format.Parse(text, graph_pb2.GraphDef())


def _write(tmp_path, gd, name="g.pb") -> str:
    path = tmp_path / name
    path.write_bytes(gd.SerializeToString() if name.endswith(".pb") else text_format.MessageToString(gd).encode())
    return str(path)


def _cli(argv, capsys) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _one_line(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


PLACEHOLDER = 'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n'
NEG = 'node { name: "y" op: "Neg" input: "x" attr { key: "T" value { type: DT_FLOAT } } }\n'


# -- attrs of the wrong kind, validated on load as TensorFlow does ------------------------------

@pytest.mark.parametrize("text, node, attr", [
    ('node { name: "x" op: "Placeholder" attr { key: "dtype" value { i: 1 } } }', "x", "dtype"),
    (PLACEHOLDER.replace("} } }", "} } attr { key: \"shape\" value { f: 2.5 } } }"), "x", "shape"),
    (PLACEHOLDER + 'node { name: "c" op: "Const" attr { key: "dtype" value { s: "float" } } '
     'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }', "c", "dtype"),
    (PLACEHOLDER + NEG.replace("DT_FLOAT", "DT_FLOAT_REF"), "y", "T"),
    (PLACEHOLDER + NEG.replace("type: DT_FLOAT", "list { type: DT_FLOAT }"), "y", "T"),
    (PLACEHOLDER + NEG.replace('value { type: DT_FLOAT }', 'value { placeholder: "T" }'), "y", "T"),
    (PLACEHOLDER.replace("type: DT_FLOAT", "type: DT_INVALID"), "x", "dtype"),
])
def test_attr_of_the_wrong_kind_is_refused_on_load(tmp_path, capsys, text, node, attr):
    path = _write(tmp_path, _gd(text))
    with pytest.raises(errors.GraphError, match=rf"g\.pb: node '{node}' .*attr '{attr}'"):
        gr.load_graph(path)
    code, err = _cli(["inspect", path], capsys)
    assert code == 1
    _one_line(err, "g.pb", f"'{node}'", f"'{attr}'")


def test_const_whose_tensor_dtype_differs_from_its_dtype_attr_is_refused(tmp_path, capsys):
    """TensorFlow refuses it; gradreg used to run it, exit 0, with a value of the other type."""
    gd = _gd('node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } '
             'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1.5 } } } }')
    path = _write(tmp_path, gd)
    with pytest.raises(errors.GraphError, match="node 'c' .*holds a float32 tensor but attr 'dtype' is int32"):
        gr.load_graph(path)
    code, err = _cli(["run", path, "--fetch", "c"], capsys)
    assert code == 1
    _one_line(err, "'c'", "'dtype'")


def test_non_utf8_text_attr_is_refused_on_load(tmp_path):
    gd = _gd('node { name: "s" op: "StackV2" input: "n" attr { key: "elem_type" value { type: DT_FLOAT } } '
             'attr { key: "stack_name" value { s: "\\377\\376" } } }\n'
             'node { name: "n" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } '
             'attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 1 } } } }')
    with pytest.raises(errors.GraphError, match="node 's' .*attr 'stack_name' is not UTF-8"):
        gr.load_graph(_write(tmp_path, gd))


def test_cycle_message_names_every_node_on_the_cycle():
    gd = _gd(PLACEHOLDER + "".join(
        f'node {{ name: "{n}" op: "Neg" input: "{i}" attr {{ key: "T" value {{ type: DT_FLOAT }} }} }}\n'
        for n, i in [("a", "c"), ("b", "a"), ("c", "b"), ("d", "c")]))
    with pytest.raises(errors.GraphError, match="cycle through node 'a' .*'a' -> 'b' -> 'c' -> 'a'"):
        gr.import_graph_def(gd)


# -- sizes: counts, output indices, nodes, nesting -------------------------------------------

@pytest.mark.parametrize("text, fragment", [
    (PLACEHOLDER + 'node { name: "s" op: "Split" input: "d" input: "x" attr { key: "T" value { type: DT_FLOAT } } '
     'attr { key: "num_split" value { i: 100000000 } } }\n'
     'node { name: "d" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } '
     'attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 0 } } } }',
     "attr 'num_split' is 100,000,000"),
    (PLACEHOLDER + 'node { name: "a" op: "AddN" input: "x" attr { key: "T" value { type: DT_FLOAT } } '
     'attr { key: "N" value { i: 100000000 } } }', "attr 'N' is 100,000,000"),
    (PLACEHOLDER + 'node { name: "u" op: "Frobnicate" input: "x" }\n'
     'node { name: "y" op: "Neg" input: "u:100000000" attr { key: "T" value { type: DT_FLOAT } } }',
     "'u:100000000'"),
])
def test_huge_counts_and_output_indices_are_refused_at_once(tmp_path, text, fragment):
    started = time.monotonic()
    with pytest.raises(errors.GraphError, match=fragment):
        gr.load_graph(_write(tmp_path, _gd(text)))
    assert time.monotonic() - started < 2


def test_node_limit(tmp_path, capsys, monkeypatch):
    gd = _gd(PLACEHOLDER + NEG)
    path = _write(tmp_path, gd)
    code, err = _cli(["inspect", path, "--max-nodes", "1"], capsys)
    assert code == 1
    _one_line(err, "g.pb", "2 nodes", "GRADREG_MAX_NODES or --max-nodes")
    assert config.max_nodes == config.DEFAULT_MAX_NODES or config.max_nodes > 1   # restored after main()
    monkeypatch.setattr(config, "max_nodes", 1)
    with pytest.raises(errors.GraphError, match="more than the limit of 1"):
        gr.load_graph(path)


def _nested_text(levels: int) -> str:
    """A graph whose one attr nests ``levels`` messages deep (counting `node {` as the first)."""
    body = "i: 1"
    for _ in range((levels - 3) // 3):
        body = f'func {{ name: "f" attr {{ key: "a" value {{ {body} }} }} }}'
    return f'node {{ name: "c" op: "NoOp" attr {{ key: "x" value {{ {body} }} }} }}'


@pytest.mark.parametrize("levels", [150, 200, 2000])
def test_text_nested_deeper_than_a_binary_graph_may_be_is_refused(tmp_path, levels):
    path = tmp_path / "deep.pbtxt"
    path.write_text(_nested_text(levels))
    with pytest.raises(errors.GraphFileError, match=r"deep\.pbtxt: messages nested \d+ deep"):
        gr.load_graph(str(path))


def test_what_loads_can_be_written_and_read_back(tmp_path):
    path = tmp_path / "deep.pbtxt"
    path.write_text(_nested_text(99))
    graph = gr.load_graph(str(path))
    gr.save_graph(graph, str(tmp_path / "deep.pb"))
    assert len(gr.load_graph(str(tmp_path / "deep.pb"))) == 1


# -- functions ------------------------------------------------------------------------------------

FUNCTION_CALL = ROOT / "function_call"


def _function_call_seed() -> graph_pb2.GraphDef:
    gd = graph_pb2.GraphDef()
    gd.ParseFromString((FUNCTION_CALL / "forward.pb").read_bytes())
    return gd


def _attr(node, key):
    return next(e.value for e in node.attr if e.key == key)


def _nest_functions(gd: graph_pb2.GraphDef, levels: int) -> None:
    """Wrap the library function in ``levels`` functions, each calling the one before."""
    fn = gd.library.function[0]
    call = next(n for n in gd.node if n.op == "PartitionedCall")
    previous = fn.signature.name
    for level in range(levels):
        wrapper = gd.library.function.add()
        wrapper.signature.CopyFrom(fn.signature)
        wrapper.signature.name = f"wrap{level}"
        node = wrapper.node_def.add()
        node.CopyFrom(call)
        node.name = "call"
        del node.input[:]
        node.input.extend(a.name for a in fn.signature.input_arg)
        _attr(node, "f").func.name = previous
        for i, arg in enumerate(fn.signature.output_arg):
            entry = wrapper.ret.add()
            entry.key, entry.value = arg.name, f"call:output:{i}"
        previous = wrapper.signature.name
    _attr(call, "f").func.name = previous


def _function_call_feeds():
    return dict(np.load(FUNCTION_CALL / "inputs.npz"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_functions_nested_too_deep(tmp_path, backend):
    expected = gr.Session(gr.load_graph(str(FUNCTION_CALL / "forward.pb")), backend=backend).run(
        "y:0", _function_call_feeds())
    gd = _function_call_seed()
    _nest_functions(gd, config.max_function_depth - 1)    # the limit itself: runs, same value
    value = gr.Session(gr.load_graph(_write(tmp_path, gd)), backend=backend).run("y:0", _function_call_feeds())
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    gd = _function_call_seed()
    _nest_functions(gd, 200)
    graph = gr.load_graph(_write(tmp_path, gd))
    with pytest.raises(errors.InvalidGraphFunctionError, match="nested more than 64 calls deep"):
        gr.Session(graph, backend=backend).run("y:0", _function_call_feeds())


@pytest.mark.parametrize("reference", ["{node}:output:inf", "{arg}:5", "{arg}:x:y:z", "{node}:output:-1"])
def test_malformed_function_input_reference(tmp_path, reference):
    gd = _function_call_seed()
    fn = gd.library.function[0]
    node = next(n for n in fn.node_def if len(n.input))
    node.input[0] = reference.format(node=fn.node_def[0].name, arg=fn.signature.input_arg[0].name)
    graph = gr.load_graph(_write(tmp_path, gd))
    with pytest.raises(errors.InvalidGraphFunctionError, match=f"node '{node.name}'"):
        gr.Session(graph, backend="numpy").run("y:0", _function_call_feeds())


# -- control flow -----------------------------------------------------------------------------------

def _corpus(name: str) -> graph_pb2.GraphDef:
    gd = graph_pb2.GraphDef()
    gd.ParseFromString((ROOT / name / "forward.pb").read_bytes())
    return gd


def _corpus_case(name: str):
    case = json.loads((ROOT / name / "case.json").read_text())
    return case["ys"], dict(np.load(ROOT / name / "inputs.npz"))


def _endless(seed: str) -> graph_pb2.GraphDef:
    """The seed's loop made endless: LoopCond fed True (v1), the While's cond returning True (v2)."""
    gd = _corpus(seed)
    if seed == "while_v1":
        assert mutate.endless_loop(random.Random(0), gd, None)
        return gd
    loop = next(n for n in gd.node if n.op in ("While", "StatelessWhile"))
    cond = next(f for f in gd.library.function if f.signature.name == _attr(loop, "cond").func.name)
    true = cond.node_def.add(name="always", op="Const")
    text_format.Parse('attr { key: "dtype" value { type: DT_BOOL } } '
                      'attr { key: "value" value { tensor { dtype: DT_BOOL tensor_shape {} bool_val: true } } }', true)
    for entry in cond.ret:
        entry.value = "always:output:0"
    return gd


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", ["while_v1", "cond_while_v2"])
def test_endless_loop_stops_at_the_iteration_limit(tmp_path, capsys, backend, seed):
    gd = _endless(seed)
    path = _write(tmp_path, gd)
    ys, feeds = _corpus_case(seed)
    with pytest.raises(errors.IterationLimitError, match="more than 1000 iterations"):
        gr.Session(gr.load_graph(path), backend=backend, loop_iteration_limit=1000).run(ys, feeds)
    np.savez(tmp_path / "feeds.npz", **feeds)
    code, err = _cli(["run", path, "--feed", tmp_path / "feeds.npz", "--fetch", ",".join(ys), "--backend", backend,
                      "--max-loop-iterations", "500"], capsys)
    assert code == 1
    _one_line(err, "more than 500 iterations", "--max-loop-iterations")


def test_the_loop_limit_is_on_by_default():
    assert config.max_loop_iterations == config.DEFAULT_MAX_LOOP_ITERATIONS == 10**7
    assert gr.Session(gr.Graph()).loop_iteration_limit == 10**7
    assert gr.Session(gr.Graph(), loop_iteration_limit=0).loop_iteration_limit is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_merge_fed_by_next_iteration_outside_a_frame(tmp_path, backend):
    gd = _gd(PLACEHOLDER + NEG + """
node { name: "m" op: "Merge" input: "y" input: "n" attr { key: "T" value { type: DT_FLOAT } }
       attr { key: "N" value { i: 2 } } }
node { name: "n" op: "NextIteration" input: "m" attr { key: "T" value { type: DT_FLOAT } } }""")
    with pytest.raises(errors.GradregError, match="'[mn]'"):
        graph = gr.load_graph(_write(tmp_path, gd))
        gr.Session(graph, backend=backend).run("m:0", {"x:0": np.ones(2, np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_counter_made_a_vector(tmp_path, backend):
    """Each loop input made a vector in turn; the loop condition's test raised inside the plan."""
    ys, feeds = _corpus_case("while_v1")
    seen = set()
    for choice in range(12):
        gd = _corpus("while_v1")
        how = mutate.vector_loop_counter(random.Random(choice), gd, None)
        if how in seen:
            continue
        seen.add(how)
        with pytest.raises(errors.GradregError, match=r"node '[^']+'"):
            gr.Session(gr.load_graph(_write(tmp_path, gd)), backend=backend).run(ys, feeds)
    assert len(seen) >= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicate_reduction_axes(tmp_path, backend):
    gd = _gd(PLACEHOLDER.replace("} } }", "} } attr { key: \"shape\" value { shape { dim { size: 2 } "
                                           "dim { size: 3 } } } } }") + """
node { name: "axes" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
       attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } }
                                            int_val: 1 int_val: 1 } } } }
node { name: "s" op: "Sum" input: "x" input: "axes" attr { key: "T" value { type: DT_FLOAT } }
       attr { key: "Tidx" value { type: DT_INT32 } } attr { key: "keep_dims" value { b: false } } }""")
    with pytest.raises(errors.GradregError, match="node 's'.*duplicate"):
        graph = gr.load_graph(_write(tmp_path, gd))
        gr.Session(graph, backend=backend).run("s:0", {"x:0": np.ones((2, 3), np.float32)})


# -- the numba backend fails as the NumPy one does ----------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_op_with_an_empty_type_attr(tmp_path, backend):
    gd = _gd(PLACEHOLDER + 'node { name: "y" op: "Sigmoid" input: "x" attr { key: "T" value { } } }')
    with pytest.raises(errors.GraphError, match="node 'y' .*attr 'T' is empty, expected a type"):
        gr.Session(gr.load_graph(_write(tmp_path, gd)), backend=backend).run("y:0", {"x:0": np.ones(2, np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_op_fed_by_an_unknown_op(tmp_path, backend):
    gd = _gd('node { name: "u" op: "Frobnicate" }\n'
             'node { name: "y" op: "Sigmoid" input: "u" attr { key: "T" value { type: DT_FLOAT } } }')
    with pytest.raises(errors.UnknownOpError, match="node 'u' .*Frobnicate"):
        gr.Session(gr.load_graph(_write(tmp_path, gd)), backend=backend).run("y:0")


# -- feeds -------------------------------------------------------------------------------------------

def _npz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _good_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{"x:0": np.ones(2, np.float32)})
    return buffer.getvalue()


@pytest.mark.parametrize("name, data, fragment", [
    ("f.npz", _good_npz()[:40], "not a readable .npz"),
    ("f.npz", b"PK\x03\x04" + b"\x00" * 100, "not a readable .npz"),
    ("f.npz", _npz({"x:0.npy": npy_with_header("{'descr': '<f4'")}), "not a readable .npy array"),
    ("f.npz", _npz({"x:0.npy": npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,)}")}),
     "1,099,511,627,776 elements"),
    ("f.npz", _npz({"x:0.npy": npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,)}")}),
     "Python objects"),
    ("x.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,)}"),
     "1,099,511,627,776 elements"),
    ("x.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", b"\x00" * 6), "truncated"),
    ("x.npy", b"", "not a readable .npy array"),
])
def test_hostile_feed_files(tmp_path, capsys, name, data, fragment):
    path = tmp_path / name
    path.write_bytes(data)
    graph = _write(tmp_path, _gd(PLACEHOLDER + NEG))
    feed = str(path) if name.endswith(".npz") else f"x={path}"
    code, err = _cli(["run", graph, "--feed", feed, "--fetch", "y"], capsys)
    assert code == 1
    _one_line(err, name, fragment)


def test_zip_bomb_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    path = tmp_path / "bomb.npz"
    path.write_bytes(zip_bomb(64))
    monkeypatch.setattr(config, "max_elements", 10**6)
    with pytest.raises(errors.ElementLimitError, match="bomb.npz: member 'x:0.npy'.*over the element limit"):
        read_npz(str(path))


def test_feed_reader_reads_what_numpy_writes(tmp_path):
    arrays = {"a:0": np.arange(6, dtype=np.float64).reshape(2, 3), "b": np.asfortranarray(np.eye(3, dtype=np.int8)),
              "c": np.array([True, False]), "d": np.zeros((0, 4), np.float32), "e": np.array(["ab", "c"])}
    np.savez_compressed(tmp_path / "f.npz", **arrays)
    read = read_npz(str(tmp_path / "f.npz"))
    assert sorted(read) == sorted(arrays)
    for key, value in arrays.items():
        assert read[key].dtype == value.dtype
        np.testing.assert_array_equal(read[key], value)
    np.save(tmp_path / "b.npy", arrays["b"])
    np.testing.assert_array_equal(read_npy(str(tmp_path / "b.npy")), arrays["b"])


# -- through a real process: one line, exit 1, no hang ---------------------------------------------

def test_cli_process_endless_loop_and_hostile_feed(tmp_path):
    gd = _endless("while_v1")
    ys, feeds = _corpus_case("while_v1")
    np.savez(tmp_path / "feeds.npz", **feeds)
    graph = _write(tmp_path, gd)
    (tmp_path / "big.npy").write_bytes(
        npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,)}"))
    for argv in (["run", graph, "--feed", tmp_path / "feeds.npz", "--fetch", ",".join(ys),
                  "--max-loop-iterations", "2000"],
                 ["run", graph, "--feed", f"x={tmp_path / 'big.npy'}", "--fetch", ys[0]]):
        done = subprocess.run([sys.executable, "-m", "gradreg", *map(str, argv)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 1, done.stderr
        _one_line(done.stderr)


# -- found by the long fuzz run ------------------------------------------------------------------------

def test_control_characters_in_a_node_name(tmp_path, capsys):
    gd = _gd(PLACEHOLDER.replace('name: "x"', 'name: "x\\ny"'))
    path = _write(tmp_path, gd)
    code, err = _cli(["inspect", path], capsys)
    assert code == 1
    _one_line(err, "g.pb", "control characters")


def test_default_gradient_of_a_tensor_with_a_dimension_past_int32(tmp_path):
    gd = _gd(PLACEHOLDER.replace("} } }", "} } attr { key: \"shape\" value { shape { dim { size: 3 } "
                                           "dim { size: 4611686018427387904 } } } } }") + NEG)
    graph = gr.load_graph(_write(tmp_path, gd))
    with graph.as_default():
        (grad,) = gr.gradients([graph.get_tensor("y:0")], [graph.get_tensor("x:0")])
    with pytest.raises(errors.ElementLimitError, match="node '[^']+'"):
        gr.Session(graph).run(grad)   # Neg's gradient needs no feed: only the ones it starts from


def test_a_static_dimension_past_int64_names_the_node(tmp_path, capsys):
    # Found by the long fuzz run: a Tile of a [2, 2**62] placeholder by [1, 4] has a static dimension
    # past int64; it surfaced, unlocated, when grad built the default grad_ys from that shape.
    shape = 'attr { key: "shape" value { shape { dim { size: 2 } dim { size: 4611686018427387904 } } } }'
    gd = _gd(PLACEHOLDER.replace("} } }", "} } " + shape + " }")
             + 'node { name: "m" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" '
               'value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } int_val: 1 int_val: 4 } } } }\n'
               'node { name: "t" op: "Tile" input: "x" input: "m" attr { key: "T" value { type: DT_FLOAT } } '
               'attr { key: "Tmultiples" value { type: DT_INT32 } } }\n')
    code, err = _cli(["grad", _write(tmp_path, gd), "--ys", "t", "--xs", "x", "-o", tmp_path / "g.pb"], capsys)
    assert code == 1
    _one_line(err, "g.pb", "node 't' (op Tile)", "past int64")


def test_a_reference_input_fed_a_plain_value_names_the_node(tmp_path, capsys):
    # Found by the long fuzz run: a Neg retyped to RefIdentity (input Ref(T)) over a placeholder loaded,
    # and running it failed inside the plan, reading a variable that was not there. TensorFlow
    # refuses such a graph on import; so does gradreg, naming the node.
    gd = _gd(PLACEHOLDER + NEG.replace('op: "Neg"', 'op: "RefIdentity"'))
    code, err = _cli(["run", _write(tmp_path, gd), "--feed", "x=1.5", "--fetch", "y"], capsys)
    assert code == 1
    _one_line(err, "g.pb", "node 'y' (op RefIdentity)", "input 0 (x:0) is float32, expected float32_ref")


def test_run_saves_string_fetches(tmp_path, capsys):
    gd = _gd('node { name: "s" op: "Const" attr { key: "dtype" value { type: DT_STRING } } '
             'attr { key: "value" value { tensor { dtype: DT_STRING tensor_shape { dim { size: 2 } } '
             'string_val: "ab" string_val: "c" } } } }')
    out = tmp_path / "out.npz"
    code, err = _cli(["run", _write(tmp_path, gd), "--fetch", "s", "-o", out], capsys)
    assert code == 0, err
    assert np.load(out)["s:0"].tolist() == [b"ab", b"c"]


def test_loop_exit_not_reading_a_switch_is_not_differentiated_to_zero():
    """An Identity between a loop variable's Switch and its Exit: the gradient was silently 0."""
    gd = _corpus("while_v1")
    exit_node = next(n for n in gd.node if n.op == "Exit" and n.input[0] == "while/Switch_1")
    identity = gd.node.add(name="while/extra_identity", op="Identity", input=["while/Switch_1"])
    text_format.Parse('attr { key: "T" value { type: DT_FLOAT } }', identity)
    exit_node.input[0] = identity.name
    graph = gr.import_graph_def(gd)
    ys, feeds = _corpus_case("while_v1")
    np.testing.assert_allclose(gr.Session(graph).run(ys, feeds),
                               gr.Session(gr.import_graph_def(_corpus("while_v1"))).run(ys, feeds))
    with graph.as_default(), pytest.raises(errors.GradientError, match="'while/Exit_1'.*reads 'while/extra_identity"):
        gr.gradients([graph.get_tensor(ys[0])], [graph.get_tensor("x:0")])


@pytest.mark.parametrize("via", ["direct", "PartitionedCall"])
def test_function_argument_with_a_huge_count(tmp_path, via):
    """A function input `x: N * T` called with N = 10**8 built 10**8 placeholders."""
    library = """library { function {
      signature { name: "f" input_arg { name: "x" type_attr: "T" number_attr: "N" }
                  output_arg { name: "y" type_attr: "T" } attr { name: "T" type: "type" }
                  attr { name: "N" type: "int" minimum: 1 } }
      node_def { name: "sum" op: "AddN" input: "x" attr { key: "T" value { placeholder: "T" } }
                 attr { key: "N" value { placeholder: "N" } } }
      ret { key: "y" value: "sum:sum:0" } } }"""
    if via == "direct":
        call = ('node { name: "c" op: "f" input: "x" attr { key: "T" value { type: DT_FLOAT } } '
                'attr { key: "N" value { i: 100000000 } } }')
    else:
        call = ('node { name: "c" op: "PartitionedCall" input: "x" '
                'attr { key: "Tin" value { list { type: DT_FLOAT } } } '
                'attr { key: "Tout" value { list { type: DT_FLOAT } } } attr { key: "f" value { func { name: "f" '
                'attr { key: "T" value { type: DT_FLOAT } } attr { key: "N" value { i: 100000000 } } } } } }')
    started = time.monotonic()
    with pytest.raises(errors.GraphError, match="100,000,000"):
        graph = gr.load_graph(_write(tmp_path, _gd(PLACEHOLDER + call + library)))
        gr.Session(graph).run("c:0", {"x:0": np.ones(2, np.float32)})
    assert time.monotonic() - started < 5


def test_empty_list_attr_is_an_empty_list(tmp_path, capsys):
    gd = _gd(PLACEHOLDER.replace("} } }", "} } attr { key: \"shape\" value { shape { dim { size: 1 } dim { size: 4 } "
                                           "dim { size: 4 } dim { size: 1 } } } } }") +
             'node { name: "p" op: "MaxPool" input: "x" attr { key: "T" value { type: DT_FLOAT } } '
             'attr { key: "ksize" value { } } attr { key: "strides" value { list { i: [1, 1, 1, 1] } } } '
             'attr { key: "padding" value { s: "VALID" } } }')
    code, err = _cli(["convert", _write(tmp_path, gd), tmp_path / "out.pbtxt"], capsys)
    assert code == 1
    _one_line(err, "'p'", "attr 'ksize' is 0, must be at least 4")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cast_to_a_type_without_a_numpy_form_names_the_node(tmp_path, backend):
    gd = _gd(PLACEHOLDER + 'node { name: "c" op: "Cast" input: "x" attr { key: "SrcT" value { type: DT_FLOAT } } '
                           'attr { key: "DstT" value { type: DT_FLOAT8_E5M2 } } }')
    with pytest.raises(errors.GradregError, match="node 'c' .*float8_e5m2"):
        gr.Session(gr.load_graph(_write(tmp_path, gd)), backend=backend).run("c:0", {"x:0": np.ones(2, np.float32)})
