"""The ``gradreg`` command line.

    gradreg inspect GRAPH [--nodes] [--json]
    gradreg run GRAPH [--feed FILE.npz | --feed NAME=FILE.npy | --feed NAME=VALUE]... --fetch NAME[,NAME...]
                [--checkpoint CKPT] [--backend numpy|numba] [--json] [-o OUT.npz]
    gradreg grad GRAPH --ys NAMES --xs NAMES [--grad-ys NAMES] [--stop NAMES] [--unconnected none|zero]
                 [--custom-gradient error|forward] [--symmetric-inputs tensorflow|symmetric|folded]
                 [-o OUT] [--json] [--feed ...]... [--checkpoint CKPT]
                 [--dask SCHEDULER|local:N [--split NAMES] [--reduction mean|sum] [--shards N]]
    gradreg check GRAPH [--ys NAMES --xs NAMES] [--backend NAME]... [--custom-gradient error|forward] [--json]
    gradreg convert IN OUT                 (.pb, .pbtxt, .json, .onnx and every format a plugin adds)
    gradreg plugins [--op OP | --check PACKAGE | --trace GRAPH] [--json]
    gradreg ops [PATTERN] [--missing] [--json]
    gradreg view GRAPH -o OUT.(svg|png|dot|html) [--ys NAMES] [--xs NAMES] [--depth N] [--expand SCOPE]...
    gradreg tensorboard GRAPH LOGDIR

A SavedModel directory in place of GRAPH, as ``saved_model_cli`` users expect (variables
restored from its ``variables/``; ``--tags`` picks the MetaGraph, default ``serve``):

    gradreg inspect DIR                                  # signatures (inputs, outputs), variables
    gradreg run DIR [--signature S] --feed inputs.npz [--fetch OUTPUTS] [-o out.npz]
    gradreg grad DIR [--signature S] --ys OUTPUTS --xs INPUTS_OR_VARIABLES [--feed inputs.npz] [-o OUT]
    gradreg freeze DIR [--signature S] -o frozen.pb

Names are the signature's: npz keys are its input names, outputs are keyed by its output
names (all of them by default), xs are its inputs or the model's variables.

Exit status: 0 success (also when the reader of the output goes away: ``gradreg inspect g.pb |
head -1``), 1 graph or runtime error (one line on stderr), 2 usage error. ``--debug`` shows the
traceback of an error. Bare ``gradreg`` prints the help and exits 0.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, NoReturn

import numpy as np

from gradreg import config, deadline
from gradreg.backends import memory
from gradreg.cli_inspect import graph_summary, node_lines, quick_graph_summary, summary_lines
from gradreg.cli_progress import shown_on
from gradreg.cli_values import PRINT_THRESHOLD, UsageError, describe, names, read_feeds, tensor_name
from gradreg.cli_view import add_view_commands
from gradreg.distributed import add_dask_arguments
from gradreg.errors import GradregError
from gradreg.formats import load_graph
from gradreg.formats.model_kinds import is_saved_model_dir
from gradreg.model.graph import Graph

__all__ = ["UsageError", "build_parser", "main", "summarize"]

# -- helpers ---------------------------------------------------------------------------

# The names this module's helpers had before they moved to gradreg.cli_values (code merged in
# from other branches may still call them).
_names = names
_tensor_name = tensor_name


OPSET_HELP = ("with an .onnx output: write ai.onnx opset N (17 up to the onnx op family's, its default), for "
              "runtimes pinned to an older one")
FLAT_HELP = ("with an .onnx output: write every node in the main graph, without model-local functions (by default "
             "each op's gradient is one function call), for runtimes that do not support them")


def _load(path: str):
    return load_graph(path)


def _read_feeds(specs: Sequence[str], graph: Graph | None = None) -> dict[str, np.ndarray]:
    return read_feeds(specs, graph)


def summarize(name: str, value: Any, threshold: int = PRINT_THRESHOLD) -> str:
    """A fetched value for people: small arrays in full, large ones as min/max/mean."""
    return describe(name, value, threshold)


def version() -> str:
    """gradreg's version, from the installed package's metadata."""
    import importlib.metadata  # here, not at start-up: importing it costs every command ~40 ms

    try:
        return importlib.metadata.version("gradreg")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: the version is read from the metadata only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"gradreg {version()}")
        parser.exit()


def _commands() -> ModuleType:
    """gradreg.cli_commands, imported when a command other than ``inspect`` of a graph file runs."""
    # start-up cost: sessions, differentiation and SavedModels are not imported for inspect or --help
    from gradreg import cli_commands
    return cli_commands


def _deferred(name: str) -> Any:
    """The command ``name`` of gradreg.cli_commands, as a parser's ``func``."""
    def run(args: argparse.Namespace) -> int:
        code: int = getattr(_commands(), name)(args)
        return code
    run.__name__ = name
    return run


# -- commands --------------------------------------------------------------------------

def cmd_inspect(args: argparse.Namespace) -> int:
    if is_saved_model_dir(args.graph):
        return _commands().inspect_saved_model(args)
    summary = None if args.nodes or args.full else quick_graph_summary(args.graph)
    if summary is None:
        summary = graph_summary(_load(args.graph), nodes=args.nodes)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for line in summary_lines(args.graph, summary):
        print(line)
    if args.nodes:
        print("nodes (name  op(inputs) -> outputs):")
        for line in node_lines(summary):
            print("  " + line)
    return 0


# -- parser and entry point ------------------------------------------------------------

EPILOGS = {
    "inspect": """examples:
  gradreg inspect model.pb                    # signature (inputs, outputs), op types, functions
  gradreg inspect model.pb --nodes | less     # ... and every node: op, inputs, dtype, shape
  gradreg inspect model.pb --json | jq '.signature.outputs[].name'
  gradreg inspect saved_model_dir/            # a SavedModel: signatures and variables
  gradreg inspect huge.pb --full              # also infer output shapes of a graph over 100,000 nodes""",
    "run": """examples:
  gradreg run model.pb --feed inputs.npz --fetch loss,logits
  gradreg run model.pb --feed 'x=[[1,2],[3,4]]' --feed keep=1.0 --fetch y    # inline values (quoted for the shell)
  gradreg run model.pb --feed x=x.npy --fetch y --checkpoint runs/model-1000.npz --json
  gradreg run saved_model_dir/ --feed inputs.npz -o outputs.npz

values: arrays of at most --threshold elements print in full, larger ones as min/max/mean; an
inline value takes the dtype of the placeholder it feeds.""",
    "grad": """examples:
  gradreg grad model.pb --ys loss --xs w,b --feed inputs.npz          # print loss and gradients
  gradreg grad model.pb --ys loss --xs w,b -o grad.pb --json          # save the gradient graph
  gradreg grad model.pb --ys y --xs x --feed 'x=[1,2,3]' --backend numpy
  gradreg grad saved_model_dir/ --ys output_0 --xs dense/kernel --feed inputs.npz -o grads.npz
  gradreg grad model.pb --ys loss --xs w,b --feed batch.npz --dask local:2 --split x:0   # data-parallel

Without -o the ys and gradients are evaluated (with --feed values) and printed.""",
    "check": """examples:
  gradreg check model.pb                          # op types lacking a definition, kernel or gradient
  gradreg check model.pb --ys loss --xs w,b       # exit 1 if one lies on the path from w,b to loss
  gradreg check model.pb --backend numpy --json""",
    "convert": """examples:
  gradreg convert model.pb model.pbtxt            # binary GraphDef -> text
  gradreg convert model.pbtxt model.json          # -> protobuf JSON (json_format)
  gradreg convert model.json model.pb
  gradreg convert model.onnx model.pbtxt          # ONNX (the onnx extra) -> GraphDef text

The formats come from the suffixes (`gradreg plugins` lists the format plugins); the input's
format is taken from its suffix, else from its content.""",
    "freeze": """examples:
  gradreg freeze saved_model_dir/ -o frozen.pb
  gradreg freeze saved_model_dir/ --signature serving_default --tags serve -o frozen.pbtxt""",
    "plugins": """examples:
  gradreg plugins                     # one row per plugin: what it provides, its status
  gradreg plugins --op MatMul         # who provides MatMul's definition, kernels, shape, gradient
  gradreg plugins --check gradreg-swish   # check a plugin package's ops and rules; exit 1 on a failure
  gradreg plugins --trace grad.pb     # which plugin and version made each gradient subgraph of a file
  gradreg plugins --json""",
    "ops": """examples:
  gradreg ops                         # every op type: kernels, shape function, gradient rule, family
  gradreg ops 'Conv*'                 # op types matching a pattern
  gradreg ops --missing               # TensorFlow's registered gradients gradreg lacks (source checkout)
  gradreg ops --json""",
}


# Every command takes the resource-limit flags; `gradreg --help` lists them, once.
LIMITS_NOTE = ("Every command also takes --debug, --quiet, --allow-files and the resource limits\n"
               "(--max-loop-iterations, --max-nodes, --max-function-depth, --max-op-arity,\n"
               "--loop-timeout, --timeout):\n"
               "`gradreg --help` describes them.")


def _subparser(sub: Any, name: str, help: str, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    return sub.add_parser(name, parents=parents, help=help, description=help[:1].upper() + help[1:] + ".",
                          epilog=EPILOGS[name] + "\n\n" + LIMITS_NOTE,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _add_execution_options(p: argparse.ArgumentParser, checkpoint: bool = True) -> None:
    """--backend, --max-elements, --threshold (and --checkpoint) of the commands that run graphs."""
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="execution backend: numpy or numba (default: numba when installed); `gradreg plugins` "
                        "lists the installed backends")
    p.add_argument("--max-elements", type=int, default=None, metavar="N",
                   help="refuse tensors with more than N elements (default 2**30)")
    p.add_argument("--threshold", type=int, default=PRINT_THRESHOLD, metavar="N",
                   help=f"print arrays of at most N elements in full, larger ones summarised (default "
                        f"{PRINT_THRESHOLD})")
    if checkpoint:
        p.add_argument("--checkpoint", metavar="CKPT",
                       help="restore the graph's variables first: a gradreg .npz checkpoint, a TensorFlow "
                            "checkpoint (prefix such as model.ckpt-3, or its directory), or a SavedModel directory "
                            "(its variables, by name)")


GRAD_YS_HELP = ("weights of the ys (default: ones): NAME=VALUE (a number or nested list, broadcast to the y's "
                "shape), NAME=FILE.npy or FILE.npz (keyed by y), NAME naming a y as on --ys; or, for a graph "
                "file, comma-separated tensors of the graph, one per y; repeatable")
FEED_HELP = ("feed values: FILE.npz (keys are tensor names like x:0; a SavedModel's input names), NAME=FILE.npy, "
             "or NAME=VALUE for a small value such as 3.5 or [[1,2],[3,4]]; repeatable")


def _add_inspect_run(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = _subparser(sub, "inspect", "summarize a graph file or a SavedModel", parents)
    p.add_argument("graph", metavar="GRAPH",
                   help="a graph file (.pb, .pbtxt, .json, .onnx, ...), or a SavedModel directory (signatures, "
                        "variables)")
    p.add_argument("--nodes", action="store_true", help="also list every node: name, op, inputs, dtype, shape")
    p.add_argument("--json", action="store_true", help="machine-readable output (shapes as lists, null if unknown)")
    p.add_argument("--full", action="store_true",
                   help="build the whole graph even when it is big (over 100,000 nodes a binary GraphDef is "
                        "summarized from its node table: ~10x faster, but output shapes are not inferred and "
                        "dtypes and cycles not checked)")
    p.set_defaults(func=cmd_inspect)

    p = _subparser(sub, "run", "run a graph or a SavedModel signature and print the fetched values", parents)
    p.add_argument("graph", metavar="GRAPH", help="a graph file, or a SavedModel directory")
    p.add_argument("--feed", action="append", default=[], metavar="FEED", help=FEED_HELP)
    p.add_argument("--fetch", action="append", default=None, metavar="NAME[,NAME...]",
                   help="tensors (x:0, or x for x:0) or operations to evaluate; for a SavedModel, signature "
                        "outputs (default: all)")
    p.add_argument("-o", "--output", metavar="OUT.npz",
                   help="save fetched values, keyed by tensor name (SavedModel: by output name)")
    p.add_argument("--json", action="store_true",
                   help='print {"outputs": [{"name", "dtype", "shape", "values"}]} (values as nested lists)')
    _add_execution_options(p)
    p.set_defaults(func=_deferred("cmd_run"))


def _add_grad(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = _subparser(sub, "grad", "differentiate: print the gradients' values or save the gradient graph", parents)
    p.add_argument("graph", metavar="GRAPH", help="a graph file, or a SavedModel directory")
    p.add_argument("--ys", required=True, metavar="NAMES",
                   help="comma-separated tensors to differentiate (SavedModel: signature outputs)")
    p.add_argument("--xs", required=True, metavar="NAMES",
                   help="comma-separated tensors to differentiate by (SavedModel: signature inputs or variables)")
    p.add_argument("--grad-ys", action="append", default=None, metavar="WEIGHTS", help=GRAD_YS_HELP)
    p.add_argument("--stop", metavar="NAMES", help="tensors to treat as constants")
    p.add_argument("--unconnected", choices=["none", "zero"], default="none",
                   help="gradient of an x that the ys do not depend on (default: none)")
    p.add_argument("--custom-gradient", choices=["error", "forward"], default="error",
                   help="a node naming a gradient this process lacks (_gradient_op_type, a frozen custom "
                   "gradient): use the gradient function saved with the graph, else fail (default), or "
                   "differentiate through its forward ops")
    p.add_argument("--symmetric-inputs", choices=["tensorflow", "symmetric", "folded"], default="tensorflow",
                   help="the gradient a free matrix gets from ops that read only its lower triangle (Cholesky, "
                        "SelfAdjointEigV2): TensorFlow's (default), 1/2 (G + G^H) for both, or folded onto the "
                        "lower triangle for both")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="save the graph with its gradient nodes (.pb, .pbtxt, .json; .onnx writes an ONNX model of the "
                        "ys and gradients). SavedModel: OUT.pb is the signature as one flat graph with its gradients "
                        "(functions inlined; run it with --checkpoint DIR, or write it with --freeze), OUTDIR/ a copy "
                        "of the SavedModel with a 'gradients' signature added, OUT.npz the gradients' values keyed "
                        "by x. Without -o the values are printed")
    p.add_argument("--freeze", action="store_true",
                   help="SavedModel, with -o OUT.pb: the variables become constants of their values")
    p.add_argument("--opset", type=int, metavar="N", help=OPSET_HELP)
    p.add_argument("--flat", action="store_true", help=FLAT_HELP)
    p.add_argument("--json", action="store_true",
                   help='print {"gradients": {x: gradient name or null}} (and "values" when evaluated)')
    p.add_argument("--feed", action="append", default=[], metavar="FEED", help=FEED_HELP)
    _add_execution_options(p)
    add_dask_arguments(p)
    p.set_defaults(func=_deferred("cmd_grad"))


def _add_tools(sub: Any, common: argparse.ArgumentParser, saved_model: argparse.ArgumentParser) -> None:
    p = _subparser(sub, "check", "list op types lacking a definition, kernel or gradient rule; exit 1 if "
                   "one lies on the path from --xs to --ys, or if the graph's outputs need one that cannot run",
                   [common])
    p.add_argument("graph", metavar="GRAPH", help="a graph file")
    p.add_argument("--ys", metavar="NAMES", help="comma-separated tensors to differentiate")
    p.add_argument("--xs", metavar="NAMES", help="comma-separated tensors to differentiate by")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="check kernels of this backend (repeatable; default: every available backend)")
    p.add_argument("--custom-gradient", choices=["error", "forward"], default="error",
                   help="as for grad: with forward, nodes naming a missing gradient do not fail the check")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_deferred("cmd_check"))

    p = _subparser(sub, "convert", "convert a graph between file formats (by suffix: .pb, .pbtxt, .json, ...)",
                   [common])
    p.add_argument("input", metavar="IN", help="the graph to read (format from its suffix, else its content)")
    p.add_argument("output", metavar="OUT", help="the file to write (format from its suffix)")
    p.add_argument("--opset", type=int, metavar="N", help=OPSET_HELP)
    p.add_argument("--flat", action="store_true", help=FLAT_HELP)
    p.set_defaults(func=_deferred("cmd_convert"))

    p = _subparser(sub, "freeze", "write a SavedModel signature as one GraphDef with its variables as constants",
                   [common, saved_model])
    p.add_argument("graph", metavar="DIR", help="a SavedModel directory")
    p.add_argument("-o", "--output", required=True, metavar="FROZEN.pb",
                   help="the frozen graph (.pb or .pbtxt), fed by the signature's input names and fetched by its "
                        "output names")
    p.set_defaults(func=_deferred("cmd_freeze"))

    p = _subparser(sub, "plugins", "list the installed plugins, what each provides, and conflicts", [common])
    p.add_argument("--op", metavar="OP", help="show who provides op type OP: definition, kernels per backend, "
                   "shape function, gradient rule, overrides")
    p.add_argument("--check", metavar="PACKAGE", help="check every op type the plugins of PACKAGE (a distribution, "
                   "module or plugin name) provide: kernels, shape functions, gradients against finite differences, "
                   "NotDifferentiable claims, GraphDef/ONNX round trips; exit 1 with one line per failure")
    p.add_argument("--trace", metavar="GRAPH", help="which plugin (name, distribution, version) made each gradient "
                   "subgraph of GRAPH (its nodes' _gradreg_rule attrs), against what is installed")
    p.add_argument("--references", default="tensorflow,onnxruntime", metavar="NAMES",
                   help="with --check: the runtimes to compare with where installed, comma-separated, or 'none' "
                        "(default: tensorflow,onnxruntime)")
    p.add_argument("-v", "--verbose", action="store_true", help="with --check: also list the checks not run, and why")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_deferred("cmd_plugins"))

    p = _subparser(sub, "ops", "list op types: kernels per backend, shape function, gradient rule, family",
                   [common])
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="only op types matching this glob (e.g. 'Conv*')")
    p.add_argument("--missing", action="store_true",
                   help="list TensorFlow's registered gradients gradreg lacks (needs tools/op_coverage.py and its "
                        "census: a source checkout)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_deferred("cmd_ops"))


def _common_options(described: bool) -> argparse.ArgumentParser:
    """--debug and the resource limits, which every command takes; described in `gradreg --help`
    only (each command's help points there instead of repeating them)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of errors" if described else argparse.SUPPRESS)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress bars (long loads and compiles show one on a terminal)" if described
                        else argparse.SUPPRESS)
    _add_limits(common, described)
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_options(described=False)
    parser = argparse.ArgumentParser(
        prog="gradreg", parents=[_common_options(described=True)], formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Differentiate, run, inspect and convert TensorFlow-compatible graphs.",
        epilog="examples:\n  gradreg inspect model.pb\n  gradreg grad model.pb --ys loss --xs w,b --feed inputs.npz\n"
               "  gradreg run model.pb --feed 'x=[[1,2]]' --fetch y\n\n"
               "`gradreg COMMAND --help` shows a command's options and examples. Exit status: 0 ok, "
               "1 graph or runtime error, 2 usage error.")
    parser.add_argument("--version", action=_VersionAction, help="print gradreg's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    saved_model = argparse.ArgumentParser(add_help=False)
    saved_model.add_argument("--signature", default=None, metavar="S",
                             help="SavedModel signature (default: serving_default, or the only one)")
    saved_model.add_argument("--tags", default=None, metavar="TAGS",
                             help="SavedModel MetaGraph tag set, comma-separated (default: serve)")
    _add_inspect_run(sub, [common, saved_model])
    _add_grad(sub, [common, saved_model])
    _add_tools(sub, common, saved_model)
    add_view_commands(sub, parents=[common])
    return parser


def _quiet_closed_pipe() -> None:
    """The reader of stdout went away (``| head``): send what is still buffered nowhere, so
    the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


# The resource limits every command takes: (flag, attribute of gradreg.config, help). The
# commands that run graphs also take --max-elements (_run_options), applied the same way.
_LIMIT_FLAGS = [
    ("--max-loop-iterations", "max_loop_iterations", "stop any while loop after N iterations (0: no limit)"),
    ("--max-nodes", "max_nodes", "refuse graph files (and function bodies) with more than N nodes"),
    ("--max-function-depth", "max_function_depth", "refuse library functions nested more than N calls deep"),
    ("--max-op-arity", "max_op_arity", "refuse nodes with more than N inputs or outputs"),
    ("--loop-timeout", "loop_timeout", "stop any loop after SECONDS of wall-clock time (0: no limit)"),
    ("--timeout", "timeout", "stop the command, loading included, after SECONDS of wall-clock time (0: no limit)"),
]
_SECONDS = frozenset({"loop_timeout", "timeout"})


def _add_limits(parser: argparse.ArgumentParser, described: bool = True) -> None:
    group = parser.add_argument_group("resource limits, for every command (defaults from the GRADREG_MAX_* and "
                                      "GRADREG_*TIMEOUT variables)") if described else parser
    for flag, attribute, text in _LIMIT_FLAGS:
        if attribute in _SECONDS:
            default = _command_timeout() if attribute == "timeout" else config.loop_timeout
            group.add_argument(flag, type=_seconds, default=None, metavar="SECONDS",
                               help=f"{text} (default {default:g})" if described else argparse.SUPPRESS)
        else:
            group.add_argument(flag, type=_non_negative, default=None, metavar="N",
                               help=f"{text} (default {getattr(config, attribute):,})" if described
                               else argparse.SUPPRESS)
    group.add_argument("--allow-files", action="append", default=None, metavar="DIR",
                       help="let the graph's file ops (SaveV2, RestoreV2, ...) read and write under DIR "
                            "(repeatable; also GRADREG_ALLOW_FILES); without it they may only read inside the "
                            "model (docs/security.md)" if described else argparse.SUPPRESS)


def _command_timeout() -> float:
    """A command's time limit when --timeout does not say: GRADREG_TIMEOUT's, or the one set in
    gradreg.config, else the command line's default (gradreg.config explains the choice)."""
    if "GRADREG_TIMEOUT" in os.environ or config.timeout != config.DEFAULT_TIMEOUT:
        return config.timeout
    return config.CLI_DEFAULT_TIMEOUT


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds: {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


@contextlib.contextmanager
def _limits_applied(args: argparse.Namespace) -> Iterator[None]:
    """The limit flags given (and --allow-files) set gradreg.config while the command runs
    (restored afterwards, for callers of main() in-process), and the command runs under its time
    limit (gradreg.deadline)."""
    attributes = ["max_elements"] + [attribute for _, attribute, _ in _LIMIT_FLAGS]
    saved = {attribute: getattr(config, attribute) for attribute in attributes}
    if getattr(args, "timeout", None) is None:
        args.timeout = _command_timeout()
    for attribute in attributes:
        value = getattr(args, attribute, None)
        if value is not None:
            setattr(config, attribute, value)
    saved_files = config.allow_files
    config.allow_files = [*saved_files, *(getattr(args, "allow_files", None) or [])]
    try:
        with deadline.time_limit(config.timeout):
            yield
    finally:
        for attribute, value in saved.items():
            setattr(config, attribute, value)
        config.allow_files = saved_files


def main(argv: Sequence[str] | None = None) -> int:
    return _main(argv)[0]


def _main(argv: Sequence[str] | None, console: bool = False) -> tuple[int, str | None]:
    """The exit code and the command that ran (None for the help printed without one).
    ``console``: the ``gradreg`` process itself runs it (entry), and exits after."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0, None
    if console and args.command in UNCOLLECTED_COMMANDS:
        gc.disable()
    with _limits_applied(args), _progress_shown(args):
        return _run_command(parser, args), args.command


def _progress_shown(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """Long loads and compiles draw a progress bar on stderr while the command runs, when stderr
    is a terminal and --quiet is not given (gradreg.cli_progress); otherwise nothing is shown."""
    if getattr(args, "quiet", False) or not _is_terminal(sys.stderr):
        return contextlib.nullcontext()
    return shown_on(sys.stderr)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


# Commands that read files and print, and write nothing: after one of them the ``gradreg``
# command leaves its objects out of the interpreter's final garbage collections (see entry).
READ_ONLY_COMMANDS = frozenset({None, "inspect", "check", "ops", "plugins"})
# Commands that read one graph and print: the ``gradreg`` command runs them without the cycle
# collector (they make no garbage cycles to speak of, and then exit), which otherwise walks every
# object of the graph once or twice after it is built (~1 s of a graph of 10**6 nodes).
UNCOLLECTED_COMMANDS = frozenset({"inspect"})


def entry() -> NoReturn:
    """The ``gradreg`` console script (and ``python -m gradreg``): :func:`main`, then exit.

    After a read-only command, every object is frozen out of the garbage collector
    (``gc.freeze``) before the interpreter exits: its final collections otherwise walk the
    objects NumPy, protobuf and the op families made, ~80 ms of a 0.45 s ``gradreg inspect``.
    The exit is otherwise the usual one (atexit callbacks run, threads are joined, files are
    closed); a command that writes files exits with the full collection, which closes a file
    left in a reference cycle. The process is the command's own: malloc may keep the freed
    memory of a plan's steps (gradreg.backends.memory), which the library leaves alone.
    """
    memory.allow_retaining()    # the command's own process: malloc keeps a plan's freed memory
    code, command = _main(None, console=True)
    if command in READ_ONLY_COMMANDS:
        gc.freeze()
    sys.exit(code)


def _run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    debug = getattr(args, "debug", False)
    if not debug:
        warnings.showwarning = _short_warning
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _quiet_closed_pipe()
        return 0
    except UsageError as exc:
        if debug:
            raise
        parser.exit(2, f"gradreg {args.command}: usage error: {exc}\n")
    except GradregError as exc:
        if debug:
            raise
        print(f"gradreg {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gradreg: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:   # a bug: still one line, the traceback with --debug
        if debug:
            raise
        print(f"gradreg {args.command}: internal error: {type(exc).__name__}: {exc} "
              f"(run with --debug for the traceback)", file=sys.stderr)
        return 1
    return 0


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (a message from a library may span several)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _short_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"gradreg: warning: {message}", file=file or sys.stderr)


if __name__ == "__main__":
    entry()
