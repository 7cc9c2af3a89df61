"""Generate the Keras softmax SavedModel of tests/test_grad_weights.py with TensorFlow's gradients.

    python tests/data/keras_softmax/make_reference.py      # needs tensorflow-cpu==2.21.0 (and its keras)

Writes next to this script:

* ``model/`` — ``keras.Model.export()`` of features[6] -> Dense(8, relu) -> Dense(4, softmax): the
  SavedModel's signature ``serving_default`` takes ``features`` and returns ``output_0``, the class
  probabilities;
* ``expected.npz`` — ``features`` (3 examples); ``probs`` TensorFlow's output; for the weights
  ``onehot2`` (class 2 of every example: [0, 0, 1, 0]) and ``r`` (a random [3, 4] array, stored
  as ``r``), TensorFlow's ``tf.GradientTape`` gradients of ``sum(weights * output)`` with respect
  to the features (``grad/<weights>/features``) and to the output layer's kernel
  (``grad/<weights>/kernel``); ``grad/ones/features``, the unweighted gradient (all but zero:
  the probabilities of an example sum to one).
"""
from __future__ import annotations

import os
import pathlib
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = pathlib.Path(__file__).parent
RNG = np.random.default_rng(20261201)


def main() -> None:
    keras = tf.keras
    keras.utils.set_random_seed(7)
    features = keras.Input((6,), name="features")
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(features)
    probs = keras.layers.Dense(4, activation="softmax", name="probs")(hidden)
    model = keras.Model(features, probs)
    path = HERE / "model"
    if path.exists():
        shutil.rmtree(path)
    model.export(str(path), verbose=False)

    x = RNG.normal(0, 1, (3, 6)).astype(np.float32)
    weights = {"onehot2": np.array([0, 0, 1, 0], np.float32), "r": RNG.normal(0, 1, (3, 4)).astype(np.float32),
               "ones": np.ones(4, np.float32)}
    expected = {"features": x, "probs": model(x).numpy(), "r": weights["r"]}
    kernel = model.get_layer("probs").kernel
    for key, w in weights.items():
        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            total = tf.reduce_sum(w * model(inputs))
        d_features, d_kernel = tape.gradient(total, [inputs, kernel])
        expected[f"grad/{key}/features"] = d_features.numpy()
        expected[f"grad/{key}/kernel"] = d_kernel.numpy()
    np.savez(HERE / "expected.npz", **expected)
    print(f"wrote model/ and expected.npz in {HERE} (TensorFlow {tf.__version__}, Keras {keras.__version__})")


if __name__ == "__main__":
    main()
