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
``loop_timeout``         ``GRADREG_LOOP_TIMEOUT``      10 s             the wall-clock time of any one loop
                                                                        (a While node, a v1 loop frame, an
                                                                        ONNX Loop or Scan), from its start
                                                                        (``0``: no limit)
``timeout``              ``GRADREG_TIMEOUT``           none (0);        the wall-clock time of one call:
                                                       300 s on the     a ``Session.run``, a
                                                       command line     ``load_graph``, a whole command
=======================  ============================  ===============  =============================

``allow_files`` (``GRADREG_ALLOW_FILES``, directories separated by ``os.pathsep``; ``--allow-files
DIR`` on the command line; default none) lists the directories a graph's file ops (SaveV2,
RestoreV2, MergeV2Checkpoints) may read and write besides the model's own root, which they may
only read (gradreg.file_access, docs/security.md).

Time is bounded by wall-clock deadlines (:mod:`gradreg.deadline`), checked between nodes, at
each loop iteration and at each library function call -- not inside one kernel, which runs to
its end (its size is bounded by ``max_elements``). The defaults are chosen as follows.

* **Each loop gets 10 s**, on by default everywhere. A runaway loop is the cheap way for a file
  to take time: a functional While whose condition is always true, an ONNX Loop with a trip
  count of 2**62. The iteration limit alone lets such a loop run 10**7 iterations: tens of
  seconds for the cheapest body, hours for a costly one; the loop budget stops it after 10 s,
  whatever one iteration costs. A legitimate loop of gradreg's users -- an RNN over a
  sequence, a decoder over its tokens, the loops of gradients -- runs in milliseconds to a
  second or two per run of the graph (the project's benchmarks: under 0.1 s); one that needs
  longer says so with ``loop_timeout``. A loop inside a loop has a budget of its own each
  time it runs; the outer one's covers them all.
* **A whole call has no deadline by default in the library** and **300 s on the command
  line**. A program embedding gradreg has its own idea of how long a call may take (a
  training step, a server's request), and a deadline makes results depend on the machine's
  speed and load, which a library should not do unasked: it sets ``timeout`` (or
  ``Session(timeout=)``, ``run(..., timeout=)``, ``with gradreg.time_limit(s):``) when it
  handles files it does not trust. The ``gradreg`` command is the tool one points at such
  files: there every command -- loading included -- ends within 300 s unless ``--timeout``
  says otherwise (``--timeout 0``: none), which also bounds what the loop budget cannot see
  (a library function calling another twice, 40 deep, is 2**40 calls without any loop).

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
DEFAULT_LOOP_TIMEOUT = 10.0
DEFAULT_TIMEOUT = 0.0           # the library's: no deadline for a whole call
CLI_DEFAULT_TIMEOUT = 300.0     # the command line's, when neither --timeout nor GRADREG_TIMEOUT says
# upb's default decoding depth limit (kUpb_WireFormat_DefaultDepthLimit): a binary GraphDef
# nested deeper does not parse, so a text one nested deeper is refused as well.
MAX_MESSAGE_DEPTH = 100


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):    # NaN too
        warnings.warn(f"ignoring {name}={raw!r}: not a number of seconds (0: no limit); using {default:g}",
                      stacklevel=2)
        return default
    return value


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
# Seconds; 0 turns the limit off.
loop_timeout: float = _env_seconds("GRADREG_LOOP_TIMEOUT", DEFAULT_LOOP_TIMEOUT)
timeout: float = _env_seconds("GRADREG_TIMEOUT", DEFAULT_TIMEOUT)
allow_files: list[str] = [d for d in os.environ.get("GRADREG_ALLOW_FILES", "").split(os.pathsep) if d.strip()]

# The flag of the command line that sets each limit, for messages.
FLAGS = {
    "max_elements": "--max-elements", "max_loop_iterations": "--max-loop-iterations",
    "max_function_depth": "--max-function-depth", "max_nodes": "--max-nodes", "max_op_arity": "--max-op-arity",
    "loop_timeout": "--loop-timeout", "timeout": "--timeout",
}
ENVIRONMENT = {
    "max_elements": "GRADREG_MAX_ELEMENTS", "max_loop_iterations": "GRADREG_MAX_LOOP_ITERATIONS",
    "max_function_depth": "GRADREG_MAX_FUNCTION_DEPTH", "max_nodes": "GRADREG_MAX_NODES",
    "max_op_arity": "GRADREG_MAX_OP_ARITY", "loop_timeout": "GRADREG_LOOP_TIMEOUT", "timeout": "GRADREG_TIMEOUT",
}


def how_to_raise(limit: str) -> str:
    """The words that tell a user how to raise ``limit`` ("max_nodes"): the variable and flag."""
    return f"{ENVIRONMENT[limit]} or {FLAGS[limit]}"
