"""What one iteration of a trivial loop costs: a functional While, an ONNX Loop, a v1 while_loop.

    python bench/loop_overhead.py [--iterations 100000] [--repeats 5]

Each loop adds 1.0 to a float ``--iterations`` times: a StatelessWhile whose condition and body
are library functions (written as TensorFlow 2 writes loops), an ONNX Loop with a trip count (its body a
subgraph), and gradreg.while_loop's v1 frame (Enter/Merge/Switch/NextIteration/Exit). Each runs
on the numpy and the numba backends; printed: microseconds per iteration, the median of
``--repeats`` runs (min..max), wall clock and the process's CPU time (the host is shared: CPU
time moves less with the load). This is the floor under every loop of a graph, and what an
endless loop pays per iteration until its time limit (gradreg.config.loop_timeout) stops it.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _timing import report_load

import gradreg as gr

_SCALAR_ARGS = "".join(
    f'arg_attr {{ key: {i} value {{ attr {{ key: "_output_shapes" value {{ list {{ shape {{}} }} }} }} }} }} '
    for i in range(3))
_LOOP_FUNCTIONS = f"""
function {{
  signature {{ name: "keep_going" input_arg {{ name: "i" type: DT_INT64 }} input_arg {{ name: "n" type: DT_INT64 }}
              input_arg {{ name: "x" type: DT_FLOAT }} output_arg {{ name: "go" type: DT_BOOL }} }}
  node_def {{ name: "less" op: "Less" input: "i" input: "n" attr {{ key: "T" value {{ type: DT_INT64 }} }} }}
  ret {{ key: "go" value: "less:z:0" }}
  {_SCALAR_ARGS}
}}
function {{
  signature {{ name: "step" input_arg {{ name: "i" type: DT_INT64 }} input_arg {{ name: "n" type: DT_INT64 }}
              input_arg {{ name: "x" type: DT_FLOAT }} output_arg {{ name: "i2" type: DT_INT64 }}
              output_arg {{ name: "n2" type: DT_INT64 }} output_arg {{ name: "x2" type: DT_FLOAT }} }}
  node_def {{ name: "one" op: "Const" attr {{ key: "dtype" value {{ type: DT_INT64 }} }}
             attr {{ key: "value" value {{ tensor {{ dtype: DT_INT64 tensor_shape {{}} int64_val: 1 }} }} }} }}
  node_def {{ name: "onef" op: "Const" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
             attr {{ key: "value" value {{ tensor {{ dtype: DT_FLOAT tensor_shape {{}} float_val: 1 }} }} }} }}
  node_def {{ name: "next" op: "AddV2" input: "i" input: "one:output:0"
             attr {{ key: "T" value {{ type: DT_INT64 }} }} }}
  node_def {{ name: "sum" op: "AddV2" input: "x" input: "onef:output:0"
             attr {{ key: "T" value {{ type: DT_FLOAT }} }} }}
  ret {{ key: "i2" value: "next:z:0" }} ret {{ key: "n2" value: "n" }} ret {{ key: "x2" value: "sum:z:0" }}
  {_SCALAR_ARGS}
}}
"""


def functional_while():
    """StatelessWhile over (i, n, x): cond i < n, body (i + 1, n, x + 1), its functions as
    TensorFlow 2 writes them (argument shapes in ``_output_shapes``)."""
    from google.protobuf import text_format
    graph_def = gr.proto.graph_pb2.GraphDef()
    text_format.Parse(_LOOP_FUNCTIONS, graph_def.library)
    text_format.Parse("""
        node { name: "n" op: "Placeholder" attr { key: "dtype" value { type: DT_INT64 } }
               attr { key: "shape" value { shape {} } } }
        node { name: "i0" op: "Const" attr { key: "dtype" value { type: DT_INT64 } }
               attr { key: "value" value { tensor { dtype: DT_INT64 tensor_shape {} int64_val: 0 } } } }
        node { name: "x0" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
               attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 0 } } } }
        node { name: "loop" op: "StatelessWhile" input: "i0" input: "n" input: "x0"
               attr { key: "T" value { list { type: DT_INT64 type: DT_INT64 type: DT_FLOAT } } }
               attr { key: "cond" value { func { name: "keep_going" } } }
               attr { key: "body" value { func { name: "step" } } }
               attr { key: "output_shapes" value { list { shape {} shape {} shape {} } } } }""", graph_def)
    graph = gr.import_graph_def(graph_def, source="loop")
    return graph, "loop:2", "n:0", np.int64


def onnx_loop():
    """An ONNX Loop with trip count n, adding 1 to a float (None when onnx is not installed)."""
    try:
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    from gradreg_plugins.onnx.format import load_onnx
    tvi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "one"], ["x_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [tvi("i", TensorProto.INT64, []), tvi("c_in", TensorProto.BOOL, []),
                 tvi("x_in", TensorProto.FLOAT, [])],
        [tvi("c_out", TensorProto.BOOL, []), tvi("x_out", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    graph = helper.make_graph([helper.make_node("Loop", ["n", "", "x0"], ["y"], body=body)], "g",
                              [tvi("n", TensorProto.INT64, [])], [tvi("y", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "x0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return load_onnx(model), "y", "n", np.int64


def v1_while_loop():
    graph = gr.Graph()
    with graph.as_default():
        n = gr.placeholder(gr.int32, [], name="n")
        _, x = gr.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + 1.0), [gr.constant(0), gr.constant(0.0)])
    return graph, x, n, np.int32


def measure(case, backend: str, iterations: int, repeats: int) -> tuple[list[float], list[float]]:
    graph, y, n, dtype = case
    session = gr.Session(graph, backend=backend)
    for _ in range(3):                             # compile, and let numba build its kernels
        session.run(y, {n: dtype(10)})
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        value = session.run(y, {n: dtype(iterations)})
        wall.append((time.perf_counter() - start) / iterations * 1e6)
        cpu.append((time.process_time() - start_cpu) / iterations * 1e6)
        assert float(value) == iterations, value
    return wall, cpu


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} ({min(values):.2f}..{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(report_load())
    print(f"us per iteration, {args.iterations:,} iterations, median (min..max) of {args.repeats} runs")
    print(f"  {'loop':18s} {'backend':8s} {'wall':>24s} {'CPU':>24s}")
    for name, make in (("functional While", functional_while), ("ONNX Loop", onnx_loop),
                       ("v1 while_loop", v1_while_loop)):
        for backend in ("numpy", "numba"):
            case = make()
            if case is None:
                print(f"  {name:18s} (onnx is not installed)")
                break
            wall, cpu = measure(case, backend, args.iterations, args.repeats)
            print(f"  {name:18s} {backend:8s} {_spread(wall):>24s} {_spread(cpu):>24s}")
    print(report_load())


if __name__ == "__main__":
    main()
