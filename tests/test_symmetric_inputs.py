"""Ops that read a Hermitian input's lower triangle (Cholesky, SelfAdjointEigV2), differentiated
w.r.t. a free matrix: a graph TensorFlow wrote (cholesky, logdet, eigvalsh, eigh of S) against
the values TensorFlow, JAX and PyTorch gave (tests/data/symmetric_inputs/make_reference.py), and
gradients(symmetric_inputs=...) / gradreg grad --symmetric-inputs:

* "tensorflow" (default): TensorFlow's values, at a Hermitian S and at one whose upper triangle
  is unrelated to its lower one: 1/2 (G + G^H) for Cholesky (TensorFlow's, JAX's and PyTorch's
  convention), G folded onto the lower triangle for SelfAdjointEigV2 (TensorFlow's);
* "symmetric": JAX's values for every output (1/2 (G + G^H) everywhere);
* "folded": central differences of the kernels themselves (the derivative in the n^2 entries).
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import gradreg as gr
from gradreg.cli import main as cli_main
from gradreg.errors import GradregError

DATA = pathlib.Path(__file__).parent / "data" / "symmetric_inputs"
OUTPUTS = {"chol_s": "s", "logdet_s": "s", "eigvalsh_s": "s", "eigh_s": "s",
           "chol_h": "h", "logdet_h": "h", "eigh_h": "h"}
POINTS = ("sym", "lower")


@pytest.fixture(scope="module")
def reference():
    with np.load(DATA / "reference.npz") as npz:
        return dict(npz)


def _gradient(reference, point: str, output: str, **options):
    """(y, dy/dx weighted by the stored cotangent) of the TF-written graph at ``point``."""
    graph = gr.load_graph(str(DATA / "forward.pb"))
    source = OUTPUTS[output]
    y = graph.get_tensor_by_name(f"{output}:0")
    x = graph.get_tensor_by_name(f"{source}:0")
    with graph.as_default():
        gy = gr.constant(reference[f"gy:{output}"])
        (dx,) = gr.gradients(y, [x], grad_ys=[gy], **options)
    feeds = {f"{name}:0": reference[f"{point}/{name}"] for name in ("s", "h")}
    return gr.Session(graph).run([y, dx], feeds)


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("output", OUTPUTS)
def test_default_gives_tensorflows_values(reference, point, output):
    y, dx = _gradient(reference, point, output)
    if not output.startswith("eigh"):     # (eigh's values depend on its solver only through roundoff)
        np.testing.assert_allclose(y, reference[f"{point}/y:{output}"], rtol=1e-10, atol=1e-12)
    expected = reference[f"{point}/tf:{output}/{OUTPUTS[output]}"]
    np.testing.assert_allclose(dx, expected, rtol=1e-8, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize("output", ["chol_s", "logdet_s", "chol_h", "logdet_h"])
def test_the_three_frameworks_agree_on_cholesky_and_logdet(reference, output):
    """What the default follows: JAX's and (real) PyTorch's Cholesky gradients are TensorFlow's.
    (PyTorch's complex Cholesky gradient is not Hermitian; its Hermitian part is the same.)"""
    tf_value = reference[f"sym/tf:{output}/{OUTPUTS[output]}"]
    for library in ("jax", "torch"):
        other = reference[f"sym/{library}:{output}/{OUTPUTS[output]}"]
        if library == "torch" and output == "chol_h":
            other = 0.5 * (other + other.conj().T)
        np.testing.assert_allclose(other, tf_value, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("output", OUTPUTS)
def test_symmetric_gives_jaxs_values(reference, output):
    _, dx = _gradient(reference, "sym", output, symmetric_inputs="symmetric")
    expected = reference[f"sym/jax:{output}/{OUTPUTS[output]}"]
    np.testing.assert_allclose(dx, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())
    np.testing.assert_allclose(dx, np.conj(np.swapaxes(dx, -1, -2)), atol=1e-9 * np.abs(dx).max())


def _central_differences(graph, y, x, gy, value, delta=1e-6):
    """d/dx of Re sum(conj(gy) y) at ``value`` over every real (and imaginary) entry, run by gradreg's
    kernels: dL/dRe + i dL/dIm (TensorFlow's convention)."""
    session = gr.Session(graph)

    def loss(v):
        return np.real(np.sum(np.conj(gy) * session.run(y, {x: v})))
    result = np.zeros(value.shape, value.dtype)
    steps = (1.0, 1j) if np.iscomplexobj(value) else (1.0,)
    for index in np.ndindex(value.shape):
        for step in steps:
            bump = np.zeros_like(value)
            bump[index] = step * delta
            result[index] += step * (loss(value + bump) - loss(value - bump)) / (2 * delta)
    return result


@pytest.mark.parametrize("output", ["chol_s", "eigvalsh_s", "chol_h", "eigh_h"])
def test_folded_is_the_derivative_of_the_kernels(reference, output):
    """At the point whose upper triangle is unrelated: only the lower triangle moves the outputs."""
    _, dx = _gradient(reference, "lower", output, symmetric_inputs="folded")
    graph = gr.load_graph(str(DATA / "forward.pb"))
    value = reference[f"lower/{OUTPUTS[output]}"]
    numeric = _central_differences(graph, f"{output}:0", f"{OUTPUTS[output]}:0", reference[f"gy:{output}"], value)
    np.testing.assert_allclose(dx, numeric, rtol=1e-5, atol=1e-6 * np.abs(numeric).max())
    np.testing.assert_array_equal(np.triu(dx, 1), 0)


def test_an_input_built_hermitian_gets_the_same_gradient_every_way():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [3, 3])
        y = gr.reduce_sum(gr.raw_ops.Cholesky(input=(x + gr.transpose(x)) * 0.5) * np.arange(9.0).reshape(3, 3))
        grads = [gr.gradients(y, [x], symmetric_inputs=mode)[0] for mode in ("tensorflow", "symmetric", "folded")]
    a = np.random.default_rng(3).normal(size=(3, 3))
    values = gr.Session(graph).run(grads, {x: a @ a.T + 3 * np.eye(3)})
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)
    np.testing.assert_allclose(values[2], values[0], rtol=1e-12)


def test_an_unknown_choice_is_an_error():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [2, 2])
        with pytest.raises(GradregError, match="symmetric_inputs: 'lower'.*'tensorflow', 'symmetric', 'folded'"):
            gr.gradients(gr.raw_ops.Cholesky(input=x), [x], symmetric_inputs="lower")


def test_a_function_differentiated_when_the_graph_runs_keeps_the_choice(reference):
    """Cholesky inside a library function called through SymbolicGradient (differentiated by its
    kernel when it runs): the node records the choice."""
    @gr.function
    def chol(m):
        return gr.raw_ops.Cholesky(input=m)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [2, 4, 4])
        y = chol(x)
        gy = gr.constant(reference["gy:chol_s"])
        grads = {mode: gr.gradients(y, [x], grad_ys=[gy], symmetric_inputs=mode)[0] for mode in ("tensorflow",
                                                                                                  "folded")}
    values = gr.Session(graph).run(grads, {x: reference["lower/s"]})
    np.testing.assert_allclose(values["tensorflow"], reference["lower/tf:chol_s/s"], rtol=1e-8, atol=1e-12)
    assert np.abs(np.triu(values["folded"], 1)).max() == 0 < np.abs(np.triu(values["tensorflow"], 1)).max()


@pytest.mark.parametrize("mode", ["tensorflow", "folded"])
def test_the_command_line_chooses(reference, tmp_path, capsys, mode):
    np.save(tmp_path / "s.npy", reference["lower/s"])
    np.save(tmp_path / "h.npy", reference["lower/h"])
    args = ["grad", str(DATA / "forward.pb"), "--ys", "chol_s", "--xs", "s", "--feed", f"s={tmp_path / 's.npy'}",
            "--feed", f"h={tmp_path / 'h.npy'}", "--json"]
    assert cli_main(args + (["--symmetric-inputs", mode] if mode != "tensorflow" else [])) == 0
    printed = json.loads(capsys.readouterr().out)
    dx = np.array(next(v["values"] for v in printed["values"] if v["name"] == printed["gradients"]["s:0"]))
    # the ys are weighted by ones from the command line
    expected = _gradient({**reference, "gy:chol_s": np.ones((2, 4, 4))}, "lower", "chol_s", symmetric_inputs=mode)[1]
    np.testing.assert_allclose(dx, expected, rtol=1e-12)
    assert (np.abs(np.triu(dx, 1)).max() == 0) == (mode == "folded")
