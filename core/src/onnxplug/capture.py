"""Whole-run capture: a provider records one run and replays it without the core's run loop.

This is the contract behind onnxruntime's ``enable_cuda_graph``.  A provider that can record the
work it queues (CUDA stream capture, say) returns a :class:`RunCapture` from
:meth:`onnxplug.api.Provider.run_capture`.  The core then uses it for ``run_with_iobinding``
calls whose bound inputs and outputs all live in that provider's memory:

1. the first run with a given binding (the same values at the same addresses, the same shapes)
   runs normally — a warm-up, so lazy initialisation (kernel compilation, library handles,
   pool growth) happens outside the recording;
2. the second run is recorded between :meth:`RunCapture.begin` and :meth:`RunCapture.end`,
   including the copies into the bound outputs, then replayed once to produce its results;
3. later runs with that binding only call the replay.

A replay reads the bound inputs at their addresses and writes the bound outputs at theirs, so the
caller changes the inputs in place (``OrtValue.update_inplace``) between runs.  Shapes are fixed by
the binding: another shape, or other buffers, is another binding (warmed up and recorded anew;
the last :data:`KEPT` bindings are kept).

The core guarantees, inside a recording: no host copy, no ``synchronize`` call and no kernel of
another provider (a session whose nodes are not all on the capturing provider is refused at
creation).  A recording that fails (a kernel that must wait for the device, say) is abandoned
with :meth:`RunCapture.abort`; the run is repeated without capture and that binding is never
recorded again (a warning says why).

.. versionadded:: 0.3 (provider API 1.2)
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["KEPT", "RunCapture"]

#: How many recorded bindings a session keeps (the least recently used is released).
KEPT = 4


class RunCapture:
    """One provider's recorder.  The core calls ``begin``, runs the plan, then ``end`` (or
    ``abort`` when the run failed); the same object records every binding in turn."""

    def begin(self) -> None:
        """Start recording the work this provider queues from now on (on this thread)."""
        raise NotImplementedError

    def end(self) -> Callable[[], None]:
        """Stop recording; returns the replay, which runs everything recorded again on the same
        memory and returns when it has finished.  The replay keeps alive whatever memory the
        recording used (its intermediate values included) until it is dropped."""
        raise NotImplementedError

    def abort(self) -> None:
        """Stop recording after a failure, discarding what was recorded."""
        raise NotImplementedError
