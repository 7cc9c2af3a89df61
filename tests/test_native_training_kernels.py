"""The training family's native loops (training/native_kernels) give the numba loops' values
(training/numba_kernels).

Each native loop and the numba loop compiled from numba_kernels' source (compile_module, as
numba_kernels builds them where native kernels are not available) run on the same random
variables, slots, gradients and hyperparameters (scalars of the dtype, as numba_kernels passes
them), float32 and float64, each flag both ways: odd lengths, zeros, infinities, NaN and
negative slots (square roots of negative numbers). Both loops do the same operations in the same
order, so the updated arrays are compared bit for bit (NaN equal to NaN).
"""
from __future__ import annotations

import numpy as np
import pytest

from gradreg.kernel_support import compile_module

pytest.importorskip("numba")
native_kernels = pytest.importorskip("gradreg_plugins.training.native_kernels")
if not native_kernels.available():
    pytest.skip("native kernels are not available here", allow_module_level=True)

from gradreg_plugins.training import numba_kernels  # noqa: E402  (after the skips)

DTYPES = [np.float32, np.float64]

# loop -> (variables (var and its slots), scalars before grad, scalars after grad, flag or None)
SIGNATURES = {
    "gradient_descent": (1, ["alpha"], [], None),
    "momentum": (2, ["lr"], ["momentum"], "use_nesterov"),
    "adam": (3, ["beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"], [], "use_nesterov"),
    "adagrad": (2, ["lr"], [], "update_slots"),
    "rms_prop": (3, ["lr", "rho", "momentum", "epsilon"], [], None),
    "centered_rms_prop": (4, ["lr", "rho", "momentum", "epsilon"], [], None),
}
HYPER = {"alpha": 0.1, "lr": 0.01, "momentum": 0.9, "beta1_power": 0.9 ** 3, "beta2_power": 0.999 ** 3,
         "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7, "rho": 0.9}
CASES = [(name, flag) for name, (_, _, _, f) in SIGNATURES.items() for flag in ([None] if f is None else [False, True])]


def _numba(dtype, name: str):
    return getattr(compile_module(numba_kernels._LOOPS, np.dtype(dtype)), name)


def _inputs(dtype, name: str, n: int, special: bool):
    rng = np.random.default_rng(n)
    variables, before, after, _ = SIGNATURES[name]
    states = [rng.standard_normal(n).astype(dtype)]
    states += [(np.abs(rng.standard_normal(n)) + 0.5).astype(dtype) for _ in range(variables - 1)]
    grad = rng.standard_normal(n).astype(dtype)
    if special and n >= 6:
        grad[:4] = [0.0, np.inf, -np.inf, np.nan]
        for s in states[1:]:
            s[4] = -1.0          # square roots of negative numbers: NaN
            s[5] = 0.0           # divisions by zero: inf / nan
    hyper = [np.asarray(HYPER[h], dtype)[()] for h in before], [np.asarray(HYPER[h], dtype)[()] for h in after]
    return states, grad, hyper


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, flag", CASES)
@pytest.mark.parametrize("n", [1, 7, 33, 1000])
@pytest.mark.parametrize("special", [False, True])
def test_update_loops(dtype, name, flag, n, special):
    states, grad, (before, after) = _inputs(dtype, name, n, special)
    flags = [] if flag is None else [flag]
    results = []
    with np.errstate(all="ignore"):
        for loop in (native_kernels.loop(dtype, name), _numba(dtype, name)):
            copies = [s.copy() for s in states]
            for _ in range(3):      # a few steps: each reads the slots the last one wrote
                loop(*copies, *before, grad, *after, *flags)
            results.append(copies)
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(results[0][0], states[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_and_read_only_gradient(dtype):
    loop = native_kernels.loop(dtype, "adam")
    empty = [np.empty(0, dtype) for _ in range(3)]
    loop(*empty, *[dtype(0.5)] * 6, np.empty(0, dtype), False)
    grad = np.ones(5, dtype)
    grad.flags.writeable = False
    var = np.zeros(5, dtype)
    native_kernels.loop(dtype, "gradient_descent")(var, dtype(0.5), grad)
    np.testing.assert_array_equal(var, np.full(5, -0.5, dtype))


def test_other_dtypes_are_unsupported():
    with pytest.raises(native_kernels.Unsupported):
        native_kernels.loop(np.float16, "adam")


# -- numba_kernels takes the native loops ----------------------------------------------------------------

def test_numba_kernels_build_the_native_loops():
    f32 = np.dtype(np.float32)
    assert numba_kernels._loop(f32, "adam") is native_kernels.loop(f32, "adam")


def test_numba_kernels_fall_back_to_numba(monkeypatch):
    f64 = np.dtype(np.float64)
    numba = numba_kernels._loops(f64).momentum

    def unsupported(*args):
        raise native_kernels.Unsupported("no native form")
    monkeypatch.setattr(native_kernels, "loop", unsupported)
    assert numba_kernels._loop(f64, "momentum") is numba
    monkeypatch.setattr(native_kernels, "available", lambda: False)
    assert numba_kernels._loop(f64, "momentum") is numba
