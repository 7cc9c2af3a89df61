"""Issue 31, "kernels made for the job": gradreg's convolution kernels against onnxruntime's (MLAS),
layer by layer at ResNet50's sizes, in CPU time on one thread (a figure a busy machine does not
move much).

    python bench/kernel_providers.py [--batch 32] [--repeats 5]

For each layer: gradreg's Conv2D and Conv2DBackpropInput (NHWC, the NumPy backend's im2col +
BLAS, GRADREG_THREADS=1 and one BLAS thread), and onnxruntime's Conv and ConvTranspose (NCHW, one
intra-op thread), plus the two NHWC <-> NCHW transposes an NHWC graph would pay around them.
Values are checked against each other first. The minimum CPU time of ``--repeats`` calls
counts (the least disturbed), with the median beside it.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import time

os.environ["GRADREG_THREADS"] = "1"

import numpy as np  # noqa: E402  (after the thread settings)
from threadpoolctl import threadpool_limits  # noqa: E402

# ResNet50's convolutions: (height, in channels, out channels, kernel, stride)
LAYERS = [(56, 64, 64, 1, 1), (56, 64, 64, 3, 1), (56, 64, 256, 1, 1), (28, 128, 128, 3, 1),
          (14, 256, 256, 3, 1), (7, 512, 512, 3, 1), (56, 256, 128, 1, 2)]


def cpu_times(fn, repeats: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times), statistics.median(times)


def gradreg_calls(x, f, stride):
    import gradreg as gr
    g = gr.Graph()
    with g.as_default():
        xp = gr.placeholder(gr.float32, x.shape)
        fp = gr.constant(f)
        y = gr.nn.conv2d(xp, fp, strides=[1, stride, stride, 1], padding="SAME")
        dy = gr.placeholder(gr.float32, y.shape.as_list())
        dx = gr.apply_op("Conv2DBackpropInput", gr.constant(list(x.shape), dtype=gr.int32), fp, dy,
                         strides=[1, stride, stride, 1], padding="SAME")
    session = gr.Session(g, backend="numpy")
    forward = session.make_callable(y, [xp])
    out = forward(x)
    backward = session.make_callable(dx, [dy])
    return (lambda: forward(x)), (lambda: backward(out)), out, backward(out)


def ort_calls(x, f, stride):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    kh = f.shape[0]
    pad = (kh - 1) // 2
    w = np.ascontiguousarray(f.transpose(3, 2, 0, 1))          # HWIO -> OIHW
    xn = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    out_h = -(-x.shape[1] // stride)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride, stride], pads=[pad] * 4)
    back = helper.make_node("ConvTranspose", ["dy", "w"], ["dx"], strides=[stride, stride], pads=[pad] * 4,
                            output_shape=list(xn.shape[2:]))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1

    def session(node, inputs, outputs):
        graph = helper.make_graph([node], "g", inputs, outputs, [onnx.numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    n, c, k = x.shape[0], x.shape[3], f.shape[3]
    fwd = session(conv, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xn.shape))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, k, out_h, out_h])])
    bwd = session(back, [helper.make_tensor_value_info("dy", TensorProto.FLOAT, [n, k, out_h, out_h])],
                  [helper.make_tensor_value_info("dx", TensorProto.FLOAT, [n, c] + list(xn.shape[2:]))])
    yn = fwd.run(None, {"x": xn})[0]
    dxn = bwd.run(None, {"dy": yn})[0]
    return (lambda: fwd.run(None, {"x": xn})), (lambda: bwd.run(None, {"dy": yn})), yn, dxn, xn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    load = pathlib.Path("/proc/loadavg").read_text().split()[0]
    print(f"CPU ms on one thread (min / median of {args.repeats}), batch {args.batch}; load {load}")
    totals = np.zeros(5)
    with threadpool_limits(1):
        for h, c, k, kh, stride in LAYERS:
            x = rng.standard_normal((args.batch, h, h, c)).astype(np.float32)
            f = (rng.standard_normal((kh, kh, c, k)) / np.sqrt(kh * kh * c)).astype(np.float32)
            g_fwd, g_bwd, gy, gdx = gradreg_calls(x, f, stride)
            o_fwd, o_bwd, oy, odx, xn = ort_calls(x, f, stride)
            np.testing.assert_allclose(oy.transpose(0, 2, 3, 1), gy, rtol=1e-3, atol=1e-3)
            np.testing.assert_allclose(odx.transpose(0, 2, 3, 1), gdx, rtol=1e-3, atol=1e-3)
            def transposes(x=x, oy=oy):
                return np.ascontiguousarray(x.transpose(0, 3, 1, 2)), np.ascontiguousarray(oy.transpose(0, 2, 3, 1))
            figures = [cpu_times(fn, args.repeats) for fn in (g_fwd, g_bwd, o_fwd, o_bwd, transposes)]
            totals += [m for m, _ in figures]
            cells = "  ".join(f"{m * 1e3:7.1f}/{med * 1e3:7.1f}" for m, med in figures)
            print(f"  {h:3}x{h:<3} {c:4}->{k:<4} {kh}x{kh} s{stride}: gradreg fwd, bwd | onnxruntime fwd, bwd | "
                  f"transposes: {cells}")
    print(f"  total (min): gradreg fwd {totals[0] * 1e3:.0f} ms, bwd {totals[1] * 1e3:.0f} ms; onnxruntime fwd "
          f"{totals[2] * 1e3:.0f} ms, bwd {totals[3] * 1e3:.0f} ms (+ transposes {totals[4] * 1e3:.0f} ms); "
          f"onnxruntime / gradreg: fwd {totals[2] / totals[0]:.2f}, bwd {totals[3] / totals[1]:.2f}")


if __name__ == "__main__":
    main()
