"""LLVM's machine-code compiler for gradreg's native kernels, through llvmlite, and calls through ctypes.

:func:`compile_ir` optimizes a module of LLVM IR (``-O3``'s pipeline for this CPU) and
compiles it in memory; the returned address is called through a ctypes function pointer of
the kernel's C signature (which releases the GIL during the call; the kernels' usual entry is
their own, pycall's, and this is its fallback). Both steps run in llvmlite's C++ library, called through ctypes,
which releases the GIL: a background thread compiling kernels does not stall the caller's
Python. An engine (and its target machine, which it owns) lives as long as the process, as
the code it holds is called for as long. The machine code is also kept in the kernel cache
directory (native/ in gradreg.backends.numba.cache's), named by a hash of the IR, the CPU and
LLVM's version: a later process loads it instead of optimizing and compiling again.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import operator
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gradreg.backends.numba.cache import cache_dir, write_machine_code

_lock = threading.Lock()
_engines: list[Any] = []    # every execution engine made: their code is called until exit
_from_cache = [0]           # how many of them loaded their machine code from the disk cache


class Unavailable(RuntimeError):
    """llvmlite is missing, or LLVM cannot compile for this machine."""


@functools.cache
def _llvm() -> Any:
    try:
        import llvmlite.binding as llvm
    except ImportError as exc:
        raise Unavailable(f"llvmlite is not installed: {exc}") from exc
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


@functools.cache
def _host() -> tuple[Any, str, str]:
    llvm = _llvm()
    target = llvm.Target.from_default_triple()
    return target, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def _target_machine() -> Any:
    target, cpu, features = _host()
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="default", codemodel="jitdefault")


@functools.cache
def _pass_builder(unroll: bool = True) -> Any:
    """``-O3``'s pipeline, with or without LLVM's loop unroller (see :func:`compile_ir`)."""
    llvm = _llvm()
    # the optimizer's target machine is its own: an execution engine owns (and frees) the one it is given
    machine = _target_machine()
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_unrolling = unroll
    return machine, options, llvm.create_pass_builder(machine, options)


def triple() -> str:
    return str(_llvm().get_process_triple())


def data_layout() -> str:
    return str(_pass_builder()[0].target_data)


def _cache_path(source: str, unroll: bool = True) -> Path | None:
    """Where the machine code of ``source`` is kept: the kernel cache directory (the numba
    backend's, gradreg.backends.numba.cache), under native/, named by a hash of the IR, the
    CPU and its features, LLVM's version and the pipeline's options; None when no directory is
    writable."""
    _, cpu, features = _host()
    # (and Python's and NumPy's versions: the entry functions read their objects' structs, pycall)
    parts = (source, triple(), cpu, features, _llvm().llvm_version_info.__str__(), sys.version, np.__version__, _FORMAT)
    digest = hashlib.sha256("\0".join(parts if unroll else (*parts, "no-unroll")).encode()).hexdigest()
    return cache_dir() / "native" / digest[:2] / f"{digest[2:34]}.o"


_FORMAT = "1"     # bump when the way kernels are compiled changes


def _read_cached(path: Path | None) -> bytes | None:
    if path is None:
        return None
    with contextlib.suppress(OSError):
        return path.read_bytes()
    return None


def _write_cached(path: Path | None, code: bytes) -> None:
    if path is not None:
        write_machine_code(path, code)


def compile_ir(source: str, names: list[str], variables: tuple[str, ...] = (), unroll: bool = True) -> dict[str, int]:
    """Optimize and compile the IR module ``source`` (or load its machine code from the disk
    cache); the addresses of its functions ``names`` and of its global ``variables``.
    ``unroll=False`` leaves out LLVM's loop unroller: for loops unrolled by hand already
    (gradreg_plugins.nn's direct convolutions, whose accumulators are a block of positions or
    channels), where it only made more code to compile and to run."""
    llvm = _llvm()
    path = _cache_path(source, unroll)
    cached = _read_cached(path)
    with _lock:
        module = llvm.parse_assembly(source)
        module.verify()
        machine, _, builder = _pass_builder(unroll)
        module.triple = triple()
        module.data_layout = str(machine.target_data)
        if cached is None:
            builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, _target_machine())
        written: list[bytes] = []
        engine.set_object_cache(lambda _, code: written.append(bytes(code)),
                                (lambda _: cached) if cached is not None else None)
        engine.finalize_object()
        _engines.append(engine)
        addresses = {name: engine.get_function_address(name) for name in names}
        addresses.update({name: engine.get_global_value_address(name) for name in variables})
    if cached is None and written:
        _write_cached(path, written[0])
    elif cached is not None:
        _from_cache[0] += 1
    return addresses


def compiled_count() -> int:
    """How many modules this process has compiled or loaded."""
    return len(_engines)


def loaded_count() -> int:
    """How many of them it loaded from the disk cache (optimized and compiled by an earlier process)."""
    return _from_cache[0]


# the C types of kernel parameters (dsl.Type.c) and results
_CTYPES: dict[str, Any] = {"void": None, "char*": ctypes.c_void_p, "int64_t": ctypes.c_int64,
                           "int32_t": ctypes.c_int32, "float": ctypes.c_float, "double": ctypes.c_double,
                           "_Bool": ctypes.c_bool}


def function(address: int, result: str, params: Sequence[str]) -> Any:
    """A ctypes function pointer to the machine code at ``address``, of C type
    ``result(*)(params...)`` (e.g. ``"void", ["char*", "int64_t"]``); ctypes releases the GIL
    during the call."""
    return _prototype(result, tuple(params))(address)


@functools.cache
def _prototype(result: str, params: tuple[str, ...]) -> Any:
    return ctypes.CFUNCTYPE(_CTYPES[result], *(_CTYPES[p] for p in params))


def data_address(array: np.ndarray, what: str) -> int:
    """The address of ``array``'s data, which must be C-contiguous (a kernel reads it as such):
    ValueError naming ``what`` otherwise."""
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous: a native kernel reads it as contiguous")
    return int(array.__array_interface__["data"][0])


def as_int(value: Any) -> int:
    """``value`` as a C integer parameter: an int or NumPy int (TypeError for a float, a string, ...)."""
    return operator.index(value)


def as_float(value: Any) -> float:
    """``value`` as a C float or double parameter: a real number (TypeError for a string, ...)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError(f"a real number is expected, not {type(value).__name__}")
    return float(value)


def available() -> bool:
    """Whether native kernels can be compiled here (llvmlite importable, LLVM set up)."""
    try:
        _llvm()
        _pass_builder()
    except Exception:
        return False
    return True
