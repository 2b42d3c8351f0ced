"""Optional ops.  An optional holding a value is the value itself (a tensor or a list) and an
empty optional is ``None``, so wrapping and unwrapping are identities on non-empty values."""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel


@kernel("Optional", since=(15, 28))
def optional(input=None, *, type=None):  # noqa: A002 - the schema's names
    return input


@kernel("OptionalHasElement", since=(15, 18, 28))
def optional_has_element(input=None):  # noqa: A002
    # From opset 18 a plain tensor or sequence counts as present, and a missing input as empty;
    # with the value representation above that is the same test at every version.
    return np.array(input is not None)


@kernel("OptionalGetElement", since=(15, 18, 28))
def optional_get_element(input):  # noqa: A002
    if input is None:
        raise InvalidArgument("OptionalGetElement: the optional input is empty")
    return input
