"""gradreg's error hierarchy.

Every error gradreg raises on bad input derives from :class:`GradregError`, and its
message names the file, node, op type or function concerned, with what was
expected versus what was found. The command line turns any ``GradregError`` into
one line on stderr and exit status 1.
"""
from __future__ import annotations


class GradregError(Exception):
    """Base class of every error gradreg raises for bad graphs, files or feeds."""


class GraphFileError(GradregError):
    """A file or byte string is not a readable GraphDef (truncated, wrong format)."""


class FileWriteError(GraphFileError):
    """A file cannot be written: the path is not a regular file (a directory, a device, a FIFO),
    its directory is missing or not writable, the disk is full. Also a GraphFileError, which
    failed graph writes raised before this class existed."""


class FileAccessError(GradregError):
    """A model file names a path gradreg may not touch for it: a read outside the model's root
    (through a link, a ``../``, an absolute path), a write or deletion outside the directories
    the caller granted, a file with other hard links (see gradreg.file_access and
    docs/security.md)."""


class GraphError(GradregError):
    """A graph is malformed: missing input, duplicate name, cycle, bad attr."""


class InvalidGraphFunctionError(GraphError):
    """A function library is malformed: a missing function, endless recursion."""


class TensorValueError(GradregError):
    """A TensorProto or value cannot become an array (size, dtype, content length)."""


class ElementLimitError(TensorValueError):
    """A tensor would hold more elements than the configured limit; refused before allocating."""


class OpArgumentError(GradregError, TypeError):
    """A builder's arguments do not fit the op definition: too many inputs, a missing input or
    attr, an unknown keyword, a list of the wrong length. Also a TypeError, as TensorFlow raises."""


class OpDefinitionError(GradregError):
    """An op definition (signature string, attr spec) is malformed."""


class UnknownOpError(GraphError):
    """A node's op type has no definition or no kernel."""


class StructureError(GradregError, ValueError):
    """Nested structures that must match do not: cond branches returning different structures, a
    loop body's results against its loop variables, shape invariants against them, a None where
    a loop variable must be a tensor. Also a ValueError, as tf.nest raises."""


class ShapeError(GraphError):
    """Static shapes are incompatible (found while building or importing a graph)."""


class TypeMismatchError(GraphError):
    """An input or attr has a dtype the op does not accept."""


class FeedError(GradregError):
    """A feed is missing, names nothing, or has the wrong shape or dtype."""


class FetchError(GradregError):
    """A fetch names no tensor or operation of the graph."""


class ExecutionError(GradregError):
    """A kernel failed while running a node; the message names the node and op type."""

    def __init__(self, message: str, node_name: str | None = None, op_type: str | None = None):
        super().__init__(message)
        self.node_name = node_name
        self.op_type = op_type


class IterationLimitError(ExecutionError):
    """A loop ran more iterations than its limit allows."""


class DeadlineExceededError(ExecutionError):
    """A call ran past its wall-clock time limit (gradreg.config.timeout, Session(timeout=...),
    ``--timeout``), or a loop past its own (gradreg.config.loop_timeout): raised between nodes,
    iterations or function calls, naming the node, loop or file it stopped at. Loading a file
    past the limit raises it too (``node_name`` None, the message naming the file)."""


class PluginError(GradregError):
    """A plugin failed to load, or two plugins claim the same op type."""


class DuplicateRuleError(PluginError):
    """An op family registered a second gradient rule for an op type without ``override=True``
    (two separate plugins providing one op type are resolved by name instead: docs/plugins.md)."""


class GradientError(GradregError):
    """Differentiation failed: no rule for an op, or a rule returned the wrong thing."""


class NoGradientError(GradientError, LookupError):
    """An op on the path between ys and xs has no gradient rule (and is not NotDifferentiable)."""


class VariableError(GradregError, ValueError):
    """get_variable found a variable where the scope does not reuse variables, or none where it
    must, or one of another shape or dtype. Also a ValueError, as TensorFlow raises."""


class CheckpointError(GradregError):
    """A checkpoint file is unreadable or does not match the variables restored into."""


class SavedModelError(GraphFileError):
    """A directory is not a readable SavedModel (no saved_model.pb, unparseable, no MetaGraph
    with the requested tags)."""


class RenderError(GradregError):
    """A picture cannot be made (``gradreg view``): Graphviz is missing or failed, or the
    format is unknown. Also importable as ``gradreg.viz.RenderError``."""


class ExternalDataError(GraphFileError):
    """A model's external data (ONNX tensors stored in other files) cannot be read safely: its
    location is absolute, has a ``..`` component, is a link or resolves outside the model's
    directory, is not a regular file, or its offset or length runs past the file's end; or the
    model came as bytes with no base directory to read it from. The message names the model
    and the tensor."""


class UnsupportedModelFormatError(GraphFileError):
    """A file is a model in a format gradreg does not read (Keras .keras or .h5, ONNX, TFLite);
    ``format`` names it and the message says what to do instead."""

    def __init__(self, message: str, format: str):
        super().__init__(message)
        self.format = format


def shown(name: str) -> str:
    """A name as messages show it: as it is, unless it holds a newline or another character
    that does not print (a mangled file's node name), which are escaped (``\\n``): an error
    stays one line."""
    return name if name.isprintable() else name.encode("unicode_escape").decode("ascii")


def describe_node(name: str, op_type: str | None = None) -> str:
    """The standard way messages name a node: ``node 'a/b' (op MatMul)``."""
    return f"node '{shown(name)}' (op {shown(op_type)})" if op_type else f"node '{shown(name)}'"
