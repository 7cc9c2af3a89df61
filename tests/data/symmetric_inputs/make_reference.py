"""TensorFlow's gradients of the ops that read a Hermitian input's lower triangle, for a free
input S: a graph TensorFlow wrote (forward.pb) computing cholesky(S), logdet(S), eigvalsh(S) and
V f(e) V^H from eigh(S), differentiated w.r.t. S itself (not a symmetrized copy), with the values
of TensorFlow, JAX and PyTorch. tests/test_symmetric_inputs.py checks gradreg against them.
Dev only (needs the `tf` extra, jax and torch):

    python tests/data/symmetric_inputs/make_reference.py

forward.pb: placeholders `s` (float64 [2, 4, 4]) and `h` (complex128 [3, 3]); outputs
`chol_s`, `logdet_s`, `eigvalsh_s`, `eigh_s` (V diag(exp(e)) V^H, which no choice of the
eigenvectors' signs or phases changes) and `chol_h`, `logdet_h`, `eigh_h`, each an Identity.
reference.npz, per point P (`sym`: S Hermitian; `lower`: only the lower triangle Hermitian
positive definite, the upper one unrelated, which the kernels ignore): `P/s`, `P/h` (inputs),
`P/y:<output>` (TensorFlow's forward values), `gy:<output>` (the cotangents), and the
gradient w.r.t. s and h of sum(gy * y) over each output alone: `P/tf:<output>/<input>` and, at
`sym`, `sym/jax:...`, `sym/torch:...`.

What they show (at `sym`; the largest differences from TensorFlow are in agreement.json):
TensorFlow, JAX and PyTorch give the same Hermitian gradient 1/2 (G + G^H) for cholesky and
logdet (PyTorch's complex cholesky gradient is not Hermitian, but has that Hermitian part); for
eigh/eigvalsh TensorFlow folds G onto the lower triangle while JAX and PyTorch give 1/2 (G + G^H).
"""
from __future__ import annotations

import json
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

jax.config.update("jax_enable_x64", True)
HERE = pathlib.Path(__file__).resolve().parent
INPUTS = {"s": ((2, 4, 4), tf.float64), "h": ((3, 3), tf.complex128)}
OUTPUTS = {"chol_s": "s", "logdet_s": "s", "eigvalsh_s": "s", "eigh_s": "s",
           "chol_h": "h", "logdet_h": "h", "eigh_h": "h"}


def tf_outputs(s, h):
    out = {"chol_s": tf.linalg.cholesky(s), "logdet_s": tf.linalg.logdet(s), "eigvalsh_s": tf.linalg.eigvalsh(s)}
    e, v = tf.linalg.eigh(s)
    out["eigh_s"] = tf.matmul(v * tf.exp(e)[..., None, :], v, adjoint_b=True)
    out["chol_h"] = tf.linalg.cholesky(h)
    out["logdet_h"] = tf.linalg.logdet(h)
    e, v = tf.linalg.eigh(h)
    out["eigh_h"] = tf.matmul(v * tf.cast(tf.exp(e), h.dtype)[..., None, :], v, adjoint_b=True)
    return {k: tf.identity(t, name=k) for k, t in out.items()}


def jax_outputs(s, h):
    # jnp's eigh and cholesky symmetrize their input: the same values at a Hermitian point
    e, v = jnp.linalg.eigh(s)
    eh, vh = jnp.linalg.eigh(h)
    return {"chol_s": jnp.linalg.cholesky(s), "logdet_s": jnp.linalg.slogdet(s)[1],
            "eigvalsh_s": jnp.linalg.eigvalsh(s),
            "eigh_s": (v * jnp.exp(e)[..., None, :]) @ jnp.swapaxes(v, -1, -2),
            "chol_h": jnp.linalg.cholesky(h), "logdet_h": jnp.linalg.slogdet(h)[1],
            "eigh_h": (vh * jnp.exp(eh).astype(h.dtype)[None, :]) @ jnp.conj(vh.T)}


def torch_outputs(s, h):
    e, v = torch.linalg.eigh(s)
    eh, vh = torch.linalg.eigh(h)
    return {"chol_s": torch.linalg.cholesky(s), "logdet_s": torch.linalg.slogdet(s)[1],
            "eigvalsh_s": torch.linalg.eigvalsh(s), "eigh_s": (v * torch.exp(e)[..., None, :]) @ v.transpose(-1, -2),
            "chol_h": torch.linalg.cholesky(h), "logdet_h": torch.linalg.slogdet(h)[1],
            "eigh_h": (vh * torch.exp(eh).to(h.dtype)[None, :]) @ vh.conj().T}


def points(rng) -> dict[str, dict[str, np.ndarray]]:
    a = rng.normal(size=(2, 4, 4))
    s = a @ np.swapaxes(a, -1, -2) / 4 + np.eye(4)
    b = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    h = b @ b.conj().T / 3 + np.eye(3)
    upper_s = np.triu(rng.normal(size=(2, 4, 4)), 1)
    upper_h = np.triu(rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3)), 1)
    return {"sym": {"s": s, "h": h}, "lower": {"s": np.tril(s) + upper_s, "h": np.tril(h) + upper_h}}


def tf_gradients(point, cotangents):
    values, grads = {}, {}
    for name, source in OUTPUTS.items():
        x = {k: tf.constant(v) for k, v in point.items()}
        with tf.GradientTape() as tape:
            tape.watch(x[source])
            y = tf_outputs(x["s"], x["h"])[name]
        values[name] = y.numpy()
        grads[f"{name}/{source}"] = tape.gradient(y, x[source], output_gradients=tf.constant(cotangents[name])).numpy()
    return values, grads


def jax_gradients(point, cotangents):
    grads = {}
    for name, source in OUTPUTS.items():
        def loss(x, name=name, source=source):
            args = dict(point, **{source: x})
            y = jax_outputs(args["s"], args["h"])[name]
            return jnp.real(jnp.sum(jnp.conj(cotangents[name]) * y))
        # jax.grad of a real loss of complex x is conj(dL/dRe + i dL/dIm): TensorFlow's convention conjugates
        grads[f"{name}/{source}"] = np.conj(np.asarray(jax.grad(loss)(jnp.asarray(point[source]))))
    return grads


def torch_gradients(point, cotangents):
    grads = {}
    for name, source in OUTPUTS.items():
        args = {k: torch.tensor(v, requires_grad=k == source) for k, v in point.items()}
        y = torch_outputs(args["s"], args["h"])[name]
        loss = torch.real(torch.sum(torch.conj(torch.tensor(cotangents[name])) * y))
        loss.backward()
        grads[f"{name}/{source}"] = args[source].grad.numpy()   # dL/dRe + i dL/dIm, as TensorFlow
    return grads


def write_graph() -> None:
    specs = [tf.TensorSpec(shape, dtype, name=name) for name, (shape, dtype) in INPUTS.items()]
    concrete = tf.function(tf_outputs).get_concrete_function(*specs)
    (HERE / "forward.pb").write_bytes(concrete.graph.as_graph_def().SerializeToString())


def main() -> None:
    rng = np.random.default_rng(0)
    write_graph()
    out, agreement = {}, {}
    at = points(rng)
    cotangents = {}
    for name, y in tf_outputs(*(tf.constant(at["sym"][k]) for k in INPUTS)).items():
        value = y.numpy()
        g = rng.normal(size=value.shape)
        cotangents[name] = g + 1j * rng.normal(size=value.shape) if np.iscomplexobj(value) else g
        out[f"gy:{name}"] = cotangents[name]
    for point, inputs in at.items():
        for k, v in inputs.items():
            out[f"{point}/{k}"] = v
        values, grads = tf_gradients(inputs, cotangents)
        out.update({f"{point}/y:{k}": v for k, v in values.items()})
        out.update({f"{point}/tf:{k}": v for k, v in grads.items()})
    for library, compute in (("jax", jax_gradients), ("torch", torch_gradients)):
        grads = compute(at["sym"], cotangents)
        out.update({f"sym/{library}:{k}": v for k, v in grads.items()})
        agreement[library] = {k: float(np.abs(v - out[f"sym/tf:{k}"]).max()) for k, v in grads.items()}
    np.savez_compressed(HERE / "reference.npz", **out)
    (HERE / "agreement.json").write_text(json.dumps(
        {"max |gradient - TensorFlow's| at the Hermitian point": agreement}, indent=1) + "\n")


if __name__ == "__main__":
    main()
