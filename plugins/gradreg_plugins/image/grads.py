"""Gradient rules of the image family: ``rule(op, *grads) -> one gradient per input``.

They emit the ops TensorFlow's image_grad.py emits (ResizeBilinearGrad, ResizeBicubicGrad,
ResizeNearestNeighborGrad, ...), so gradreg's gradient graphs import into TensorFlow; where
gradreg differs from TensorFlow, the family's docstring lists it and the rule says why.
"""
from __future__ import annotations

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op
from gradreg.model import dtypes
from gradreg_plugins.image import colour, family, transform

_FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


def _is_float(t) -> bool:
    return t.dtype.base_dtype in _FLOATS


def spatial_size(t):
    """[height, width] of an NHWC tensor: a Const when static, else sliced from its Shape."""
    dims = t.shape.as_list()[1:3] if t.shape.rank == 4 else [None, None]
    if None not in dims:
        return rules.ints(dims)
    return apply_op("StridedSlice", apply_op("Shape", t), rules.ints([1]), rules.ints([3]), rules.ints([1]))


def _flags(op) -> dict:
    return {"align_corners": op.get_attr("align_corners"), "half_pixel_centers": op.get_attr("half_pixel_centers")}


def _cast(t, dtype):
    return t if t.dtype.base_dtype is dtype else apply_op("Cast", t, DstT=dtype)


# -- resizing ---------------------------------------------------------------------------------------

@family.gradient("ResizeBilinear")
def _resize_bilinear_grad(op, grad):
    images = op.inputs[0]
    if not _is_float(images):
        return None, None
    return apply_op("ResizeBilinearGrad", grad, images, **_flags(op)), None


@family.gradient("ResizeBicubic")
def _resize_bicubic_grad(op, grad):
    # ResizeBicubicGrad runs float32 and float64 images only; half-precision images get their
    # gradient through float32 (TensorFlow's rule gives them None).
    images = op.inputs[0]
    if not _is_float(images):
        return None, None
    dtype = images.dtype.base_dtype
    if dtype in (dtypes.float32, dtypes.float64):
        return apply_op("ResizeBicubicGrad", grad, images, **_flags(op)), None
    wide = apply_op("ResizeBicubicGrad", grad, _cast(images, dtypes.float32), **_flags(op))
    return _cast(wide, dtype), None


@family.gradient("ResizeNearestNeighbor")
def _resize_nearest_grad(op, grad):
    images = op.inputs[0]
    if not _is_float(images):
        return None, None
    return apply_op("ResizeNearestNeighborGrad", grad, spatial_size(images), **_flags(op)), None


# The gradient ops are linear in their incoming gradient, with the forward resize (to the
# gradient's size) as adjoint. TensorFlow registers no rule for them (ResizeBilinearGrad is
# marked not differentiable): gradreg's are exact, so second derivatives through resizes exist.

@family.gradient("ResizeBilinearGrad")
def _resize_bilinear_grad_grad(op, grad):
    grads = op.inputs[0]
    return apply_op("ResizeBilinear", grad, spatial_size(grads), **_flags(op)), None


@family.gradient("ResizeBicubicGrad")
def _resize_bicubic_grad_grad(op, grad):
    grads = op.inputs[0]
    return apply_op("ResizeBicubic", grad, spatial_size(grads), **_flags(op)), None


@family.gradient("ResizeNearestNeighborGrad")
def _resize_nearest_grad_grad(op, grad):
    grads = op.inputs[0]
    return apply_op("ResizeNearestNeighbor", grad, spatial_size(grads), **_flags(op)), None


@family.gradient("ScaleAndTranslate")
def _scale_and_translate_grad(op, grad):
    # ScaleAndTranslateGrad runs float32 only: other images get their gradient through float32
    # (TensorFlow's rule builds the op with their type, which it refuses). As in TensorFlow,
    # scale and translation get none.
    images, _, scale, translation = op.inputs
    if not _is_float(images):
        return None, None, None, None
    attrs = {"kernel_type": op.get_attr("kernel_type"), "antialias": op.get_attr("antialias")}
    wide = apply_op("ScaleAndTranslateGrad", grad, _cast(images, dtypes.float32), scale, translation, **attrs)
    return _cast(wide, images.dtype.base_dtype), None, None, None


@family.gradient("ScaleAndTranslateGrad")
def _scale_and_translate_grad_grad(op, grad):
    # Linear in grads; its adjoint is the forward op at the gradient's size (TensorFlow: no rule).
    grads, _, scale, translation = op.inputs
    attrs = {"kernel_type": op.get_attr("kernel_type"), "antialias": op.get_attr("antialias")}
    return apply_op("ScaleAndTranslate", grad, spatial_size(grads), scale, translation, **attrs), None, None, None


# -- crops ------------------------------------------------------------------------------------------

@family.gradient("CropAndResize")
def _crop_and_resize_grad(op, grad):
    # As TensorFlow: the image gets CropAndResizeGradImage (float images only), the boxes
    # CropAndResizeGradBoxes (the bilinear sample's derivative, for the nearest method too).
    image, boxes, box_ind, _ = op.inputs
    d_image = None
    if _is_float(image):
        d_image = apply_op("CropAndResizeGradImage", grad, boxes, box_ind, rules.shape_vector(image),
                           T=image.dtype.base_dtype, method=op.get_attr("method"))
    return d_image, apply_op("CropAndResizeGradBoxes", grad, image, boxes, box_ind), None, None


@family.gradient("CropAndResizeGradImage")
def _crop_and_resize_grad_image_grad(op, grad):
    # GradImage(g, boxes) = A(boxes)^T g, A the (linear) crop: its adjoint in g is the crop of
    # the upstream gradient h, and <h, A(b)^T g> = <A(b) h, g> differentiates in the boxes as
    # the crop of h does (TensorFlow has no rule).
    grads, boxes, box_ind, _ = op.inputs
    method = op.get_attr("method")
    d_grads = apply_op("CropAndResize", grad, boxes, box_ind, spatial_size(grads), method=method)
    d_boxes = apply_op("CropAndResizeGradBoxes", grads, grad, boxes, box_ind)
    return d_grads, d_boxes, None, None


# -- projective transforms -------------------------------------------------------------------------------
# TensorFlow transforms the gradient with the inverse transform, which is not the adjoint of
# the sampling; gradreg's rule is (see gradreg_plugins.image.transform).

@family.gradient("ImageProjectiveTransformV2")
def _image_projective_transform_v2_grad(op, grad):
    if not _is_float(op.inputs[0]):
        return None, None, None
    d_images, _ = transform.projective_adjoint(op, grad)
    return d_images, None, None


@family.gradient("ImageProjectiveTransformV3")
def _image_projective_transform_v3_grad(op, grad):
    if not _is_float(op.inputs[0]):
        return None, None, None, None
    d_images, d_fill = transform.projective_adjoint(op, grad)
    return d_images, None, None, d_fill


# -- colour -------------------------------------------------------------------------------------------------

@family.gradient("RGBToHSV")
def _rgb_to_hsv_grad(op, grad):
    # Derived from the conversion's formulas (gradreg_plugins.image.colour): TensorFlow's
    # values, built from fewer ops.
    return colour.rgb_to_hsv_grad(op.inputs[0], op.outputs[0], grad)


@family.gradient("HSVToRGB")
def _hsv_to_rgb_grad(op, grad):
    # TensorFlow has no rule; the conversion is piecewise linear in h and bilinear in (s, v).
    return colour.hsv_to_rgb_grad(op.inputs[0], grad)


@family.gradient("AdjustContrastv2")
def _adjust_contrast_grad(op, grad):
    # (x - mean) * f + mean is linear in x and self-adjoint (the spatial mean is a symmetric
    # projection): the image gets AdjustContrastv2 of the gradient; the factor gets
    # sum(grad * (x - mean)). TensorFlow registers no rule.
    images, factor = op.inputs
    spatial = rules.ints([-3, -2])
    wide_grad, wide_images = _cast(grad, dtypes.float32), _cast(images, dtypes.float32)
    centered = wide_images - apply_op("Mean", wide_images, spatial, keep_dims=True)
    d_factor = apply_op("Sum", wide_grad * centered, apply_op("Range", 0, apply_op("Rank", grad), 1))
    return apply_op("AdjustContrastv2", grad, factor), d_factor
