"""The kernel author's toolkit: what an op family's kernels use to run fast, in one public module.

    import numpy as np
    from gradreg import kernel_support as ks

    def scale_rows(x, out):                         # a kernel splitting its rows over threads
        parts = min(ks.threads_for(x.size, 1 << 18), len(x))
        pieces = ks.split(len(x), parts)
        ks.parallel(lambda i: np.multiply(x[slice(*pieces[i])], 2, out=out[slice(*pieces[i])]), parts)
        return out

Threads (gradreg.backends.threads, gradreg.backends.workers):

* ``threads_for(work, work_per_thread)``: the threads a call of ``work`` units earns, within
  the cores this process may use and the limits its user set (GRADREG_THREADS,
  OMP_NUM_THREADS, threadpoolctl's limits, the container's CPU quota);
* ``parallel(fn, parts)``: ``[fn(0), ..., fn(parts - 1)]``, part 0 on the calling thread and
  the others on gradreg's kernel threads (``fn`` should release the GIL: a numba ``nogil``
  loop, a NumPy call); ``split(n, parts)`` cuts ``range(n)`` into contiguous pieces;
* ``blas_threads(n)``: BLAS on at most ``n`` threads inside the ``with`` (each part of a
  ``parallel`` kernel that calls BLAS: one), put back as the caller had it after;
* ``product(a, b, threads)``: ``np.matmul(a, b)`` cut among ``threads`` of gradreg's threads,
  BLAS on one thread in each part (never BLAS's own threads, which spin long after a call).
* ``column_sums(matrix)``: ``matrix.sum(axis=0)`` of a 2-D array as one BLAS product with a row
  of ones (a sum over a batch's positions: several times NumPy's sum's speed).

Compiled loops (the numba backend, gradreg.backends.numba):

* ``numba_available()``: whether numba is installed (a numba kernel factory returns None
  otherwise);
* ``compile_module(source, dtype)``: a module of hand-written numba code (``{exp}`` and the
  other math-library names become their ``dtype`` versions, ``{=c}`` constants of
  ``dtype``), kept in gradreg's disk cache; its functions should be ``njit(cache=True)``;
* ``writable(a)``: ``a``, or a copy when it is read-only. A plan's constants (a frozen graph's
  weights, a Const's indices) are read-only arrays, a type of their own to numba: a loop given
  one is compiled again at call time, in the caller's thread. Pass a loop's small inputs
  through it (weights, indices); large ones the loop should not be handed read-only;
* ``native_loop(build, *args)``: ``build(*args)``, a native kernel's builder (gradreg.native),
  or None where native kernels are unavailable, ``build`` is None or it raised Unsupported:
  the family's numba loop serves then;
* ``elementwise(...)`` (also in gradreg.plugin) describes an elementwise op for fusion;
  ``same_shapes`` is the ``accepts`` of ops that do not broadcast, ``accept_arrays`` of ops
  that broadcast a row but refuse scalars (BiasAdd).

Memory (gradreg.backends.memory):

* ``Recycler()``: ``empty(shape, dtype)`` as ``np.empty``, but a large array it handed out
  before comes back once nothing else references it: a kernel keeps one (in its factory) for
  outputs that are large temporaries of a plan, which then keep their pages from call to call.

Families import this module, never gradreg.backends' own modules: a backend may change how
it does these things without touching a family.
"""
from gradreg.backends.memory import Recycler
from gradreg.backends.native import native_loop
from gradreg.backends.numba.cache import writable
from gradreg.backends.numba.codegen import compile_module
from gradreg.backends.numba.description import accept_arrays, elementwise, numba_available, same_shapes
from gradreg.backends.threads import blas_threads, max_threads, threads_for
from gradreg.backends.workers import column_sums, parallel, product, split

__all__ = ["Recycler", "accept_arrays", "blas_threads", "column_sums", "compile_module", "elementwise", "max_threads",
           "native_loop", "numba_available", "parallel", "product", "same_shapes", "split", "threads_for", "writable"]
