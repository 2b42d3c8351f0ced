"""CPU kernels of the text ops, written with numpy's vectorised string functions.

onnxplug hands string tensors to kernels as ``object`` arrays of ``str``; numpy's
``np.strings`` functions work on fixed-width unicode arrays, so kernels convert on the way in
and back to ``object`` on the way out.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument
from onnxplug.kernels import KernelRegistry

from . import DOMAIN

registry = KernelRegistry("example_textops")

# Every code point that str.isspace() accepts (none lies above U+3000).
_WHITESPACE = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


def _unicode(x: np.ndarray) -> np.ndarray:
    text = np.asarray(x, dtype=np.str_)
    return text if text.dtype.itemsize else text.astype("U1")


@registry.kernel("StringLower", since=(1,), domain=DOMAIN)
def string_lower(x):
    return np.strings.lower(_unicode(x)).astype(object)


@registry.kernel("StringReplace", since=(1,), domain=DOMAIN)
def string_replace(x, *, pattern, rewrite):
    if not pattern:
        raise InvalidArgument("StringReplace: the pattern attribute must not be empty")
    return np.strings.replace(_unicode(x), pattern, rewrite).astype(object)


@registry.kernel("WordCount", since=(1,), domain=DOMAIN)
def word_count(x):
    # View each fixed-width string as a row of UTF-32 code points; a word starts wherever a
    # non-space code point follows a space (or the start of the string).
    text = np.ascontiguousarray(_unicode(x)).reshape(-1)
    codes = text.view(np.uint32).reshape(text.size, text.dtype.itemsize // 4)
    in_word = (codes != 0) & ~np.isin(codes, _WHITESPACE)
    starts = in_word.copy()
    starts[:, 1:] &= ~in_word[:, :-1]
    return starts.sum(axis=1, dtype=np.int64).reshape(np.shape(x))
