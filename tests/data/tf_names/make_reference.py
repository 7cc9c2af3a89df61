"""Generate TensorFlow reference data for tests/test_tf_names.py: the names TensorFlow 2.x in
graph mode (tf.compat.v1, v1 control flow) gives every node of the programs of
names_scenario.py.

    python tests/data/tf_names/make_reference.py        # with the tf extra (tensorflow-cpu)

Writes ``names.json`` next to this script: for each program, its nodes as [name, op type] in
the order TensorFlow made them, and the TensorFlow version that made them.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402  (after the environment set-up above)

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))

from names_scenario import PROGRAMS  # noqa: E402  (the scenario sits next to this script)


class _Namespace:
    """A TensorFlow namespace of tf.compat.v1 in which the names gradreg gives TensorFlow 2's
    functions (gradreg's where, ones_like, avg_pool2d, softmax_cross_entropy_with_logits take
    TensorFlow 2's arguments and build its graphs) are TensorFlow 2's."""

    def __init__(self, v1, v2, names: tuple[str, ...], **namespaces: _Namespace):
        self._v1, self._v2, self._names, self._namespaces = v1, v2, names, namespaces

    def __getattr__(self, name: str):
        if name in self._namespaces:
            return self._namespaces[name]
        return getattr(self._v2 if name in self._names else self._v1, name)


api = _Namespace(tf.compat.v1, tf, ("where", "ones_like"),
                 nn=_Namespace(tf.compat.v1.nn, tf.nn, ("avg_pool2d", "softmax_cross_entropy_with_logits")))


def nodes(program) -> list[list[str]]:
    graph = tf.Graph()
    with graph.as_default():
        program(api)
    return [[node.name, node.op] for node in graph.as_graph_def().node]


if __name__ == "__main__":
    tf.compat.v1.disable_control_flow_v2()   # Switch/Merge and Enter/Exit, as gradreg builds them
    programs = {name: nodes(p) for name, p in PROGRAMS.items()}
    lines = [f'{{"tensorflow": {json.dumps(tf.__version__)}, "programs": {{']
    for i, (name, found) in enumerate(programs.items()):
        rows = ",\n  ".join(json.dumps(node) for node in found)
        lines.append(f' {json.dumps(name)}: [\n  {rows}\n ]' + ("," if i < len(programs) - 1 else ""))
    lines.append("}}")
    (HERE / "names.json").write_text("\n".join(lines) + "\n")
    print(f"wrote names.json ({len(PROGRAMS)} programs, TensorFlow {tf.__version__}) in {HERE}")
