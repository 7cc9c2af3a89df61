"""Connectionist temporal classification: CTCLoss (blank = the last class) and CTCLossV2 (blank = 0,
cuDNN's convention, which TensorFlow runs on GPUs only) — definitions, shape functions, the
NumPy kernel and the rule.

The kernel is Graves' forward-backward in log space, with TensorFlow's conventions: the label
sequence gets blanks around and between its labels; alpha includes the emission at t, beta
excludes it; with ``ctc_merge_repeated`` false a non-blank state cannot repeat from one frame to
the next (every frame emits a label), and ``preprocess_collapse_repeated`` merges repeated
labels first. The op's second output is d loss / d logits (softmax minus the label posterior),
zero past each sequence's length; the rule scales it by the loss's cotangent.

Float64 is computed in float64 throughout. TensorFlow's float64 kernel sums probabilities with
float32 expf/log1pf, so its values carry float32 rounding (the op sweep's finite-difference
check flags its float64 case).
"""
from __future__ import annotations

import numpy as np

from gradreg.build.builders import apply_op
from gradreg.model.shapes import TensorShape
from gradreg_plugins.nn import family
from gradreg_plugins.nn.kernels import kernel

op = family.op

_ATTRS = ["preprocess_collapse_repeated: bool = false", "ctc_merge_repeated: bool = true",
          "ignore_longer_outputs_than_inputs: bool = false"]


def _label_sequences(indices: np.ndarray, values: np.ndarray, batch: int) -> list[list[int]]:
    """The sparse labels as one list per batch element, in index order."""
    if indices.ndim != 2 or indices.shape[1] != 2:
        raise ValueError(f"labels_indices must be a matrix with 2 columns, got shape {list(indices.shape)}")
    if values.ndim != 1 or values.shape[0] != indices.shape[0]:
        raise ValueError(f"labels_values must be a vector as long as labels_indices, got shape {list(values.shape)}")
    if indices.size and (indices[:, 0].min() < 0 or indices[:, 0].max() >= batch):
        raise ValueError(f"labels batch index must be between 0 and {batch - 1}")
    order = np.lexsort((indices[:, 1], indices[:, 0]))
    labels: list[list[int]] = [[] for _ in range(batch)]
    for b, value in zip(indices[order, 0], values[order]):
        labels[int(b)].append(int(value))
    return labels


def _extended(label: list[int], blank: int, num_classes: int, collapse: bool, b: int) -> list[int]:
    """l': the (collapsed) labels with a blank before each and one at the end."""
    if not label:
        raise ValueError(f"Labels length is zero in batch {b}")
    kept = [v for i, v in enumerate(label) if i == 0 or not collapse or v != label[i - 1]]
    if blank == num_classes - 1:
        # TensorFlow: labels >= num_classes - 1 end the sequence; a label after one is an error.
        end = next((i for i, v in enumerate(kept) if v >= num_classes - 1), len(kept))
        if any(v < num_classes - 1 for v in kept[end:]):
            raise ValueError(f"Saw a non-null label (index >= num_classes - 1) following a null label, batch: {b} "
                             f"num_classes: {num_classes} labels: {label}")
        kept = kept[:end]
    for v in kept:
        if v < 0 or v >= num_classes or v == blank:
            raise ValueError(f"labels must be in [0, {num_classes}) and not the blank {blank}, batch: {b} "
                             f"labels: {label}")
    out = [blank]
    for v in kept:
        out += [v, blank]
    return out


def _log_sum(*terms: np.ndarray) -> np.ndarray:
    total = terms[0]
    for term in terms[1:]:
        total = np.logaddexp(total, term)
    return total


def _transitions(l_prime: np.ndarray, blank: int, merge_repeated: bool):
    """Which states may stay (u -> u) and skip (u - 2 -> u)."""
    stay = np.full(len(l_prime), True) if merge_repeated else (l_prime == blank)
    skip = np.zeros(len(l_prime), bool)
    skip[2:] = l_prime[2:] != blank
    if merge_repeated:
        skip[2:] &= l_prime[2:] != l_prime[:-2]
    return stay, skip


def ctc_sequence(log_y: np.ndarray, l_prime: list[int], blank: int, merge_repeated: bool):
    """(loss, d loss / d logits) of one sequence: ``log_y`` [T, classes] log softmax."""
    steps, classes = log_y.shape
    lp = np.asarray(l_prime)
    u_count = len(lp)
    stay, skip = _transitions(lp, blank, merge_repeated)
    emit = log_y[:, lp]                                  # [T, U]
    alpha = np.full((steps, u_count), -np.inf)
    alpha[0, :2] = emit[0, :2]
    for t in range(1, steps):
        prev = alpha[t - 1]
        shifted1 = np.concatenate([[-np.inf], prev[:-1]])
        shifted2 = np.where(skip, np.concatenate([[-np.inf, -np.inf], prev[:-2]]), -np.inf)
        alpha[t] = emit[t] + _log_sum(np.where(stay, prev, -np.inf), shifted1, shifted2)
    beta = np.full((steps, u_count), -np.inf)
    beta[-1, -2:] = 0.0
    skip_from = np.concatenate([skip[2:], [False, False]])   # u may go to u + 2
    stay_from = stay
    for t in range(steps - 2, -1, -1):
        nxt = beta[t + 1] + emit[t + 1]
        ahead1 = np.concatenate([nxt[1:], [-np.inf]])
        ahead2 = np.where(skip_from, np.concatenate([nxt[2:], [-np.inf, -np.inf]]), -np.inf)
        beta[t] = _log_sum(np.where(stay_from, nxt, -np.inf), ahead1, ahead2)
    log_p = np.logaddexp.reduce(alpha[0] + beta[0])
    y = np.exp(log_y)
    if not np.isfinite(log_p):
        return -log_p, y
    posterior = np.full((steps, classes), -np.inf)
    joint = alpha + beta
    for u, label in enumerate(lp):
        posterior[:, label] = np.logaddexp(posterior[:, label], joint[:, u])
    return -log_p, y - np.exp(posterior - log_p)


def _ctc_kernel(blank_last: bool):
    def factory(op, ctx):
        collapse = bool(op.get_attr("preprocess_collapse_repeated"))
        merge = bool(op.get_attr("ctc_merge_repeated"))
        ignore_longer = bool(op.get_attr("ignore_longer_outputs_than_inputs"))

        def compute(inputs, labels_indices, labels_values, sequence_length):
            if inputs.ndim != 3:
                raise ValueError(f"inputs is not a 3-Tensor, got shape {list(inputs.shape)}")
            steps, batch, classes = inputs.shape
            if sequence_length.shape != (batch,):
                raise ValueError(f"len(sequence_length) != batch_size: {list(sequence_length.shape)} vs {batch}")
            if (sequence_length < 0).any() or (sequence_length > steps).any():
                raise ValueError(f"sequence_length must be in [0, {steps}], got {sequence_length.tolist()}")
            blank = classes - 1 if blank_last else 0
            labels = _label_sequences(labels_indices, labels_values, batch)
            work = np.float64 if inputs.dtype == np.float64 else np.float32
            loss = np.zeros(batch, work)
            grad = np.zeros(inputs.shape, work)
            for b in range(batch):
                length = int(sequence_length[b])
                l_prime = _extended(labels[b], blank, classes, collapse, b)
                n_labels = len(labels[b])
                if n_labels > length and not ignore_longer:
                    raise ValueError(f"Not enough time for target transition sequence (required: {n_labels}, "
                                     f"available: {length}){b}You can turn this error into a warning by using the "
                                     f"flag ignore_longer_outputs_than_inputs")
                if length == 0 or n_labels > length:
                    continue
                logits = inputs[:length, b].astype(np.float64)
                shifted = logits - logits.max(axis=1, keepdims=True)
                log_y = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
                loss[b], grad[:length, b] = ctc_sequence(log_y, l_prime, blank, merge)
            return loss.astype(inputs.dtype), grad.astype(inputs.dtype)
        return compute
    return factory


kernel("CTCLoss")(_ctc_kernel(blank_last=True))
kernel("CTCLossV2")(_ctc_kernel(blank_last=False))


def _ctc_shape(ctx):
    inputs = ctx.input_shape(0)
    if inputs.rank is not None and inputs.rank != 3:
        raise ctx.error(f"inputs must be 3-D [max_time, batch, classes], got shape {inputs}")
    dims = inputs.with_rank(3).as_list()
    batch = dims[1]
    lengths = ctx.input_shape(3)
    if lengths.rank == 1 and lengths[0] is not None:
        if batch is not None and lengths[0] != batch:
            raise ctx.error(f"sequence_length ({lengths[0]}) and inputs' batch ({batch}) disagree")
        batch = lengths[0]
    return [TensorShape([batch]), TensorShape([dims[0], batch, dims[2]])]


op("CTCLoss", inputs=["inputs: T", "labels_indices: int64", "labels_values: int32", "sequence_length: int32"],
   outputs=["loss: T", "gradient: T"], attrs=_ATTRS + ["T: {float32, float64} = float32"], shape=_ctc_shape)
op("CTCLossV2", inputs=["inputs: float32", "labels_indices: int64", "labels_values: int32", "sequence_length: int32"],
   outputs=["loss: float32", "gradient: float32"], attrs=_ATTRS, shape=_ctc_shape)


def _ctc_loss_grad(op, grad_loss, _grad_gradient):
    # The gradient output has no derivative here (as in TensorFlow: PreventGradient makes a
    # second derivative an error instead of a silently wrong zero).
    gradient = apply_op("PreventGradient", op.outputs[1],
                        message="Currently there is no way to take the second derivative of ctc_loss due to the "
                                "fused implementation's interaction with tf.gradients()")
    scale = apply_op("ExpandDims", apply_op("ExpandDims", grad_loss, np.int32(0)), np.int32(-1))
    return gradient * scale, None, None, None


family.gradient("CTCLoss", "CTCLossV2")(_ctc_loss_grad)
