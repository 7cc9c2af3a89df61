"""The image op family: resizing (bilinear, nearest neighbour, bicubic, area, ScaleAndTranslate's
sampling kernels) with the gradient ops TensorFlow's rules emit, CropAndResize, projective
transforms, and colour-space conversion and adjustment. Owns each op's definition, NumPy kernel,
shape function and gradient rule.

Where gradreg differs from TensorFlow (each rule's comment says more):

* TensorFlow marks ResizeBilinearGrad not differentiable and registers nothing for
  ResizeNearestNeighborGrad and ResizeBicubicGrad; each is linear in its gradient input, and
  gradreg differentiates it with the forward resize (its adjoint), so second derivatives
  through a resize exist.
* ResizeBicubic of float16 or bfloat16 images gets a gradient (through float32), where
  TensorFlow's rule gives None; ScaleAndTranslate of non-float32 images likewise (TensorFlow's
  rule builds a ScaleAndTranslateGrad it cannot run). ScaleAndTranslateGrad and
  CropAndResizeGradImage have rules (TensorFlow: none).
* ImageProjectiveTransformV2/V3: TensorFlow's rule transforms the gradient with the inverse
  transform, which is not the adjoint of the sampling; gradreg's is, and fill_value gets its
  gradient (``transform``; the op sweep lists the cases as TENSORFLOW_WRONG).
* HSVToRGB and AdjustContrastv2 have rules (TensorFlow: none); AdjustHue, AdjustSaturation and
  ResizeArea have kernels and, as in TensorFlow, no gradient.
* CropAndResize's box gradient is TensorFlow's: the bilinear sample's derivative, for the
  nearest method too (its exact derivative is zero almost everywhere; TensorFlow's surrogate is
  kept, as quantizers keep their straight-through estimators).
"""
from gradreg.plugin import OpFamily

# Modules of kernels and of gradient rules only: imported when a kernel or rule table is first read.
family = OpFamily(
    "image", lazy_kernels={"numba": "gradreg_plugins.image.numba_kernels"},
    kernel_modules=[
        "gradreg_plugins.image.colour",
        "gradreg_plugins.image.crop",
        "gradreg_plugins.image.kernels",
        "gradreg_plugins.image.transform",
    ],
    gradient_modules=["gradreg_plugins.image.grads"],
)

from gradreg_plugins.image import ops  # noqa: E402,F401  (they fill the family's tables)
