"""Control flow kernels (to be filled)."""

from __future__ import annotations

from ._registry import kernel  # noqa: F401
