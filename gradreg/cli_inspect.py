"""What ``gradreg inspect GRAPH`` reports about a graph file: its signature, its op types (those
inside library functions counted separately), its functions, and with ``--nodes`` one line per
node. A model file that declares its inputs and outputs (ONNX) gives them under its own names,
with symbolic dimensions by name, and facts about the file (producer, IR version, opsets); a
GraphDef's are found: inputs are the placeholders, outputs the tensors nothing consumes that are
results, not loop internals or control-flow and variable plumbing.

    >>> summary = graph_summary(load_graph("model.pb"))
    >>> summary["signature"]["inputs"]
    [{'name': 'x:0', 'dtype': 'float32', 'shape': [None, 784]}]
"""
from __future__ import annotations

import collections
from typing import Any

from gradreg.errors import GradregError
from gradreg.model.frames import ENTER, EXIT, LOOP_COND, NEXT_ITERATION, SWITCH, LoopStructure, is_loop_merge
from gradreg.model.graph import Graph, Operation, Tensor
from gradreg.model.model_file import DeclaredTensor, model_file
from gradreg.model.shapes import TensorShape
from gradreg.model.traversal import topological_order

PLACEHOLDERS = frozenset({"Placeholder", "PlaceholderV2", "PlaceholderWithDefault"})

# Sinks that are not results: constants, no-ops and assertions; v1 control-flow plumbing (a
# Switch's unused branch, a loop's Enter/NextIteration/LoopCond); variables and their reads,
# writes and initialization checks, and checkpoint save/restore nodes.
NOT_OUTPUTS = frozenset({
    "Const", "NoOp", "Assert", "ControlTrigger", "Print", "PrintV2",
    *PLACEHOLDERS, *SWITCH, *ENTER, *NEXT_ITERATION, LOOP_COND,
    "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "Assign", "AssignVariableOp",
    "AssignAdd", "AssignSub", "AssignAddVariableOp", "AssignSubVariableOp", "VarIsInitializedOp",
    "IsVariableInitialized", "DestroyResourceOp",
    "SaveV2", "SaveSlices", "Save", "RestoreV2", "RestoreSlice", "Restore", "MergeV2Checkpoints",
    "ShardedFilename", "ShardedFilespec", "StringJoin",
})
SAVE_RESTORE = frozenset({"SaveV2", "SaveSlices", "Save", "RestoreV2", "RestoreSlice", "Restore",
                          "MergeV2Checkpoints"})


def shape_list(shape: TensorShape | None) -> list[int | None] | None:
    """A shape as JSON has it: a list with None for unknown dimensions, None for unknown rank."""
    if shape is None or shape.dims is None:
        return None
    return list(shape.dims)


def shape_text(shape: list[int | str | None] | None) -> str:
    """``[N, 3, ?]``: a symbolic dimension by its name, an unknown one as ``?``."""
    return "<unknown rank>" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def tensor_info(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "dtype": t.dtype.name if t.dtype is not None else None, "shape": shape_list(t.shape)}


def declared_info(d: DeclaredTensor) -> dict[str, Any]:
    """A declared input or output: its name in the file, declared dtype and shape (symbolic
    dimensions by name), and the graph's tensor."""
    return {"name": d.name, "dtype": d.dtype, "shape": None if d.shape is None else list(d.shape),
            "tensor": d.tensor.name}


def default_outputs(graph: Graph) -> list[Tensor]:
    """What ``gradreg run`` fetches without ``--fetch``: the outputs ``inspect`` lists (a model file's
    declared outputs, else the graph's results)."""
    declared = model_file(graph)
    if declared is not None and declared.outputs:
        return [d.tensor for d in declared.outputs]
    return real_outputs(graph)


def _loop_ops(graph: Graph) -> set[Operation]:
    """The ops inside v1 loop frames (empty if the frames cannot be worked out)."""
    ops = graph.get_operations()
    if not any(op.type in ENTER for op in ops):
        return set()
    try:
        structure = LoopStructure(topological_order(ops))
    except GradregError:
        return set()
    return {op for op, frame in structure.frame_of.items()
            if frame.parent is not None and structure.value_frame(op).parent is not None}


def _saver_plumbing(op: Operation) -> bool:
    """Nodes a TF1 Saver adds after its save or restore ops (save/control_dependency), and the
    ends of a ``tf.tuple`` nobody reads (its Identities wait on a ``tuple/group_deps`` NoOp:
    TF1 optimizers leave one per gradient of an input)."""
    return any(c.type in SAVE_RESTORE or c.name.endswith("tuple/group_deps") for c in op.control_inputs) or any(
        t.op.type in SAVE_RESTORE for t in op.inputs)


def _feeds_only_saver(op: Operation) -> bool:
    """A placeholder that only feeds a Saver's file name (save/filename, save/Const)."""
    consumers = [c for t in op.outputs for c in t.consumers_view()]
    return bool(consumers) and all(
        c.type in SAVE_RESTORE or _saver_plumbing(c) or (c.type in PLACEHOLDERS and _feeds_only_saver(c))
        for c in consumers)


PASS_THROUGH = frozenset({"Identity", "Snapshot", "StopGradient"})
LOOPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})
CONSTANTS = frozenset({"Const", "VarHandleOp", "VariableV2", "Variable", "Placeholder", "PlaceholderV2"})


def _used(tensors: list[Tensor], scope: str) -> bool:
    """Whether one of ``tensors`` feeds something other than a dangling Identity that the loop
    added in its own name scope (TF2 puts one on every While output)."""
    for t in tensors:
        for c in t.consumers_view():
            dangling = c.type in PASS_THROUGH and not any(o.consumers_view() for o in c.outputs)
            if not (dangling and c.name.startswith(scope + "/")):
                return True
    return False


def _plumbing(op: Operation, graph: Graph) -> bool:
    """A sink that only passes on a constant, a variable, or a loop variable nobody reads while
    the loop's other results are used (a While's unused outputs; a TF1 loop has an Exit per loop
    variable, the counter's among them)."""
    if not op.outputs:
        return False
    source_tensor = op.outputs[0]
    if op.type not in EXIT:
        while source_tensor.op.type in PASS_THROUGH and source_tensor.op.inputs:
            source_tensor = source_tensor.op.inputs[0]
        if source_tensor.op is op:
            return False
    source = source_tensor.op
    if source.type in CONSTANTS:
        return True
    if source.type in LOOPS:
        return _used([t for t in source.outputs if t is not source_tensor], source.name)
    if source.type in EXIT:
        scope = source.name.rpartition("/")[0]
        siblings = [o.outputs[0] for o in graph.operations()
                    if o.type in EXIT and o is not source and o.name.rpartition("/")[0] == scope]
        return _used(siblings, scope)
    return False


def real_outputs(graph: Graph) -> list[Tensor]:
    """Tensors nobody consumes, of ops that compute a result, outside loops: not NOT_OUTPUTS,
    not an op used as a control dependency (a cond's switch_t), not the unused second output of
    an op whose first is used, not plumbing (see _plumbing)."""
    inside_loops = _loop_ops(graph)
    out = []
    for op in graph.operations():
        # The commonest reason first, cheaply: a graph of a million nodes is a million of these.
        outputs = op.outputs
        if len(outputs) == 1 and outputs[0].consumers_view():
            continue
        if (any(t.consumers_view() for t in outputs) or op.type in NOT_OUTPUTS or op in inside_loops
                or is_loop_merge(op) or _saver_plumbing(op) or op.control_outputs or _plumbing(op, graph)):
            continue
        out.extend(op.outputs)
    return out


def node_info(op: Operation) -> dict[str, Any]:
    """One node for ``--nodes``: name, op type, inputs (control inputs as ^name), outputs."""
    return {"name": op.name, "op": op.type,
            "inputs": [t.name for t in op.inputs] + [f"^{c.name}" for c in op.control_inputs],
            "outputs": [{"dtype": t.dtype.name if t.dtype is not None else None, "shape": shape_list(t.shape)}
                        for t in op.outputs]}


def function_summary(graph: Graph) -> dict[str, dict[str, Any]]:
    """Per library function: its node count and op-type histogram."""
    out: dict[str, dict[str, Any]] = {}
    for name in graph.library.names():
        fdef = graph.library.get(name)
        nodes = list(fdef.node_def) if fdef is not None else []
        histogram = collections.Counter(node.op for node in nodes)
        out[name] = {"nodes": len(nodes), "op_types": dict(sorted(histogram.items()))}
    return out


def graph_summary(graph: Graph, nodes: bool = False) -> dict[str, Any]:
    """What ``gradreg inspect GRAPH --json`` prints."""
    ops = graph.get_operations()
    functions = function_summary(graph)
    in_functions: collections.Counter[str] = collections.Counter()
    for info in functions.values():
        in_functions.update(info["op_types"])
    declared = model_file(graph)
    if declared is not None:
        signature = {"inputs": [declared_info(d) for d in declared.inputs],
                     "outputs": [declared_info(d) for d in declared.outputs]}
    else:
        signature = {"inputs": [tensor_info(op.outputs[0]) for op in ops
                                if op.type in PLACEHOLDERS and not _feeds_only_saver(op)],
                     "outputs": [tensor_info(t) for t in real_outputs(graph)]}
    summary: dict[str, Any] = {
        "nodes": len(ops),
        "signature": signature,
        "op_types": dict(sorted(collections.Counter(op.type for op in ops).items())),
        "function_nodes": sum(info["nodes"] for info in functions.values()),
        "function_op_types": dict(sorted(in_functions.items())),
        "functions": functions,
    }
    if declared is not None:
        summary["model"] = {"format": declared.format, **declared.facts}
    if nodes:
        summary["node_list"] = [node_info(op) for op in ops]
    return summary


def summary_lines(path: str, summary: dict[str, Any]) -> list[str]:
    """The text form of :func:`graph_summary`."""
    lines = [f"graph: {path}"]
    if "model" in summary:
        facts = dict(summary["model"])
        lines.append(f"model: {facts.pop('format').upper()}")
        lines += [f"  {key}: {value}" for key, value in facts.items()]
    lines.append(f"nodes: {summary['nodes']}" + (
        f" (+ {summary['function_nodes']} inside {_count(len(summary['functions']), 'function')})"
        if summary["functions"] else ""))
    for kind in ("inputs", "outputs"):
        tensors = summary["signature"][kind]
        lines.append(f"{kind}:" if tensors else f"{kind}: none")
        lines += [f"  {t['name']}  {t['dtype'] or '?'} {shape_text(t['shape'])}" for t in tensors]
    lines.append("op types:")
    lines += _histogram_lines(summary["op_types"])
    if summary["functions"]:
        lines.append(f"functions ({len(summary['functions'])}):")
        lines += [f"  {name}  {info['nodes']} nodes" for name, info in summary["functions"].items()]
        lines.append("op types inside functions:")
        lines += _histogram_lines(summary["function_op_types"])
    else:
        lines.append("functions: none")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _histogram_lines(histogram: dict[str, int]) -> list[str]:
    return [f"  {count:6d}  {op_type}" for op_type, count in sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))]


def node_lines(summary: dict[str, Any]) -> list[str]:
    """``--nodes``: one line per node, ``name  op  (inputs) -> dtype [shape], ...``."""
    lines = []
    for node in summary["node_list"]:
        outputs = ", ".join(f"{o['dtype'] or '?'} {shape_text(o['shape'])}" for o in node["outputs"]) or "-"
        lines.append(f"{node['name']}  {node['op']}({', '.join(node['inputs'])}) -> {outputs}")
    return lines
