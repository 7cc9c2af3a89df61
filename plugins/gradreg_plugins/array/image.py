"""``gradreg.image``: the image builders that rearrange pixels (TensorFlow's tf.image.flip_left_right,
flip_up_down, transpose), on one image ``[height, width, channels]`` or a batch
``[batch, height, width, channels]`` — built from ReverseV2 and Transpose as TensorFlow builds them, and
named as it names them: inside the scope of the function's name (``flip_left_right/ReverseV2``,
``transpose/transpose``; TensorFlow also adds an Identity there, which gradreg does not need)."""
from __future__ import annotations

from gradreg.build.builders import apply_op, convert_to_tensor, op_scope
from gradreg.errors import ShapeError
from gradreg.model.graph import Tensor
from gradreg_plugins.array import family

api = family.api_function


def _image(image, what: str) -> tuple[Tensor, int]:
    """``image`` as a Tensor, and how many leading dimensions come before height (0 or 1)."""
    image = convert_to_tensor(image, name="image")
    rank = image.shape.rank
    if rank not in (3, 4):
        found = "an unknown rank" if rank is None else f"shape {image.shape}"
        raise ShapeError(f"image.{what}: {image.name} has {found}; an image is [height, width, channels] "
                         f"or [batch, height, width, channels]")
    return image, rank - 3


@api("image.flip_left_right")
def flip_left_right(image, name=None):
    """``image`` mirrored horizontally: the width axis reversed."""
    with op_scope(name, "flip_left_right", (image,)):
        image, batch = _image(image, "flip_left_right")
        return apply_op("ReverseV2", image, [1 + batch])


@api("image.flip_up_down")
def flip_up_down(image, name=None):
    """``image`` mirrored vertically: the height axis reversed."""
    with op_scope(name, "flip_up_down", (image,)):
        image, batch = _image(image, "flip_up_down")
        return apply_op("ReverseV2", image, [batch])


@api("image.transpose")
def transpose(image, name=None):
    """``image`` with height and width swapped."""
    with op_scope(name, "transpose", (image,)):
        image, batch = _image(image, "transpose")
        perm = [0, 2, 1, 3] if batch else [1, 0, 2]
        with op_scope(name, "transpose", (image,)) as inner:
            return apply_op("Transpose", image, perm, name=inner)
