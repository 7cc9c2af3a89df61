"""Process-wide settings: the resource limits that keep every input bounded in time and memory.

Each limit has a default no real model comes near, an environment variable read when gradreg is
imported, and a command-line flag; the runtime ones are also ``Session`` arguments. Assign the
module attribute to change one for the process (``gradreg.config.max_nodes = 10**7``).

=======================  ============================  ===============  =============================
attribute                environment variable          default          what it bounds
=======================  ============================  ===============  =============================
``max_elements``         ``GRADREG_MAX_ELEMENTS``      2**30            the elements of any one tensor: a
                                                                        kernel's output, a Const, a feed
                                                                        (checked before allocating, feeds
                                                                        before they are read)
``max_loop_iterations``  ``GRADREG_MAX_LOOP_ITERATIONS``  10**7         iterations of any one while loop
                                                                        (``0``: no limit)
``max_function_depth``   ``GRADREG_MAX_FUNCTION_DEPTH``  64             library functions calling
                                                                        functions, nested
``max_nodes``            ``GRADREG_MAX_NODES``         5,000,000        the nodes of a graph file (and of
                                                                        each function body)
``max_op_arity``         ``GRADREG_MAX_OP_ARITY``      100,000          the inputs or outputs one node may
                                                                        have (attrs ``N``, ``num_split``,
                                                                        ``num``, type lists; output indices)
=======================  ============================  ===============  =============================

``allow_files`` (``GRADREG_ALLOW_FILES``, directories separated by ``os.pathsep``; ``--allow-files
DIR`` on the command line; default none) lists the directories a graph's file ops (SaveV2,
RestoreV2, MergeV2Checkpoints) may read and write besides the model's own root, which they may
only read (gradreg.file_access, docs/security.md).

The nesting of protobuf messages in a graph file is bounded too, at :data:`MAX_MESSAGE_DEPTH`
(protobuf's own decoding limit, the same for the text format), so a graph that loads can always
be written and read back.
"""
from __future__ import annotations

import os
import warnings

DEFAULT_MAX_ELEMENTS = 1 << 30
DEFAULT_MAX_LOOP_ITERATIONS = 10**7
DEFAULT_MAX_FUNCTION_DEPTH = 64
DEFAULT_MAX_NODES = 5_000_000
DEFAULT_MAX_OP_ARITY = 100_000
# upb's default decoding depth limit (kUpb_WireFormat_DefaultDepthLimit): a binary GraphDef
# nested deeper does not parse, so a text one nested deeper is refused as well.
MAX_MESSAGE_DEPTH = 100


def _env_int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        warnings.warn(f"ignoring {name}={raw!r}: not an integer; using {default}", stacklevel=2)
        return default
    if value < minimum:
        warnings.warn(f"ignoring {name}={raw!r}: must be at least {minimum}; using {default}", stacklevel=2)
        return default
    return value


max_elements: int = _env_int("GRADREG_MAX_ELEMENTS", DEFAULT_MAX_ELEMENTS)
# 0 turns the loop limit off.
max_loop_iterations: int = _env_int("GRADREG_MAX_LOOP_ITERATIONS", DEFAULT_MAX_LOOP_ITERATIONS, minimum=0)
max_function_depth: int = _env_int("GRADREG_MAX_FUNCTION_DEPTH", DEFAULT_MAX_FUNCTION_DEPTH)
max_nodes: int = _env_int("GRADREG_MAX_NODES", DEFAULT_MAX_NODES)
max_op_arity: int = _env_int("GRADREG_MAX_OP_ARITY", DEFAULT_MAX_OP_ARITY)
allow_files: list[str] = [d for d in os.environ.get("GRADREG_ALLOW_FILES", "").split(os.pathsep) if d.strip()]

# The flag of the command line that sets each limit, for messages.
FLAGS = {
    "max_elements": "--max-elements", "max_loop_iterations": "--max-loop-iterations",
    "max_function_depth": "--max-function-depth", "max_nodes": "--max-nodes", "max_op_arity": "--max-op-arity",
}
ENVIRONMENT = {
    "max_elements": "GRADREG_MAX_ELEMENTS", "max_loop_iterations": "GRADREG_MAX_LOOP_ITERATIONS",
    "max_function_depth": "GRADREG_MAX_FUNCTION_DEPTH", "max_nodes": "GRADREG_MAX_NODES",
    "max_op_arity": "GRADREG_MAX_OP_ARITY",
}


def how_to_raise(limit: str) -> str:
    """The words that tell a user how to raise ``limit`` ("max_nodes"): the variable and flag."""
    return f"{ENVIRONMENT[limit]} or {FLAGS[limit]}"
