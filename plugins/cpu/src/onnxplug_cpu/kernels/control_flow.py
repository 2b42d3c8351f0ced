"""Control flow: If, Loop and Scan.

All three are kernel factories: their subgraphs are compiled once per node when the session is
created (``ctx.subgraph``), and the per-run callable receives the node's formal inputs followed by
the values of enclosing scopes that the subgraphs read; those are handed unchanged to every run
of a subgraph.  Values flowing through branches and loop-carried slots may be tensors, sequences
(lists) or optionals (``None`` when empty): nothing here looks inside them except scan outputs,
which are stacked tensors.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.graph import np_dtype
from onnxplug.kernels import check_terminate

from ._registry import kernel


def _scalar_bool(value, what):
    array = np.asarray(value)
    if array.size != 1:
        raise InvalidArgument(f"{what} must hold a single element, got shape {list(array.shape)}")
    return bool(array.reshape(-1)[0])


def _blank_output(graph, index, leading, what):
    """A zero-filled stacked output for a scan output that never ran: its element type and known
    dims come from the body graph's declared output type (unknown dims become 0)."""
    value = graph.outputs[index]
    if not isinstance(value.type, ir.TensorType):
        raise Fail(f"{what}: zero iterations and the body output '{value.name}' has no tensor type")
    dtype = np_dtype(int(value.type.dtype))
    dims = () if value.shape is None else tuple(d if isinstance(d, int) else 0 for d in value.shape)
    return np.zeros(leading + dims, dtype=dtype)


def _stack(values, what):
    # Elementwise kernels may hand back numpy scalars for 0-d results.
    values = [np.asarray(v) if isinstance(v, np.generic) else v for v in values]
    for value in values:
        if not isinstance(value, np.ndarray):
            raise Fail(f"{what}: scan outputs must be tensors, got {type(value).__name__}")
    shapes = {v.shape for v in values}
    if len(shapes) > 1:
        raise Fail(f"{what}: the body produced scan output slices of different shapes {sorted(shapes)}")
    return np.stack(values)


# ---------------------------------------------------------------------------------------------
# If


@kernel("If", since=(1, 11, 13, 16, 19, 21, 23, 24, 25), factory=True)
def if_(ctx, *, then_branch, else_branch):
    then_run = ctx.subgraph("then_branch")
    else_run = ctx.subgraph("else_branch")
    for name, runner in (("then_branch", then_run), ("else_branch", else_run)):
        if len(runner.output_names) != ctx.num_outputs:
            raise Fail(
                f"{ctx.describe()}: {name} has {len(runner.output_names)} outputs, the node has {ctx.num_outputs}"
            )

    def run(cond, *outer):
        branch = then_run if _scalar_bool(cond, "If condition") else else_run
        return tuple(branch((), outer))

    return run


# ---------------------------------------------------------------------------------------------
# Loop


@kernel("Loop", since=(1, 11, 13, 16, 19, 21, 23, 24, 25), factory=True)
def loop(ctx, *, body):
    runner = ctx.subgraph("body")
    carried = ctx.num_inputs - 2
    if len(runner.input_names) != carried + 2:
        raise Fail(
            f"{ctx.describe()}: the body takes {len(runner.input_names)} inputs, expected "
            f"{carried + 2} (iteration number, condition and {carried} loop-carried values)"
        )
    scans = len(runner.output_names) - 1 - carried
    if scans < 0:
        raise Fail(
            f"{ctx.describe()}: the body has {len(runner.output_names)} outputs, expected at "
            f"least {carried + 1} (condition and {carried} loop-carried values)"
        )
    formal = ctx.num_inputs
    what = ctx.describe()

    def run(*args):
        trip_count, cond = args[0], args[1]
        state = list(args[2:formal])
        outer = args[formal:]
        limit = None
        if trip_count is not None:
            array = np.asarray(trip_count)
            if array.size != 1:
                raise InvalidArgument(f"Loop trip count M must hold a single element, got shape {list(array.shape)}")
            limit = int(array.reshape(-1)[0])
        keep_going = True if cond is None else _scalar_bool(cond, "Loop condition")
        cond_value = np.array(keep_going) if cond is None else cond
        collected = [[] for _ in range(scans)]
        iteration = 0
        # Without M and cond only the body's condition (or terminate) ends the loop, as in
        # onnxruntime; the spec's "ignored" condition would make such a loop endless.
        while keep_going and (limit is None or iteration < limit):
            check_terminate()
            outputs = runner([np.array(iteration, dtype=np.int64), cond_value, *state], outer)
            cond_value = outputs[0]
            keep_going = _scalar_bool(cond_value, "Loop body condition")
            state = outputs[1 : 1 + carried]
            for bucket, value in zip(collected, outputs[1 + carried :]):
                bucket.append(value)
            iteration += 1
        stacked = []
        for k, bucket in enumerate(collected):
            if bucket:
                stacked.append(_stack(bucket, what))
            else:
                stacked.append(_blank_output(body, 1 + carried + k, (0,), what))
        return (*state, *stacked)

    return run


# ---------------------------------------------------------------------------------------------
# Scan


def _axes(values, count, default, what):
    values = tuple(values) if values else (default,) * count
    if len(values) != count:
        raise Fail(f"Scan {what} has {len(values)} entries, expected {count}")
    return values


def _normalise_axis(axis, rank, what):
    if not -rank <= axis < rank:
        raise InvalidArgument(f"Scan {what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@kernel("Scan", since=(9, 11, 16, 19, 21, 23, 24, 25), factory=True)
def scan(
    ctx,
    *,
    body,
    num_scan_inputs,
    scan_input_axes=None,
    scan_input_directions=None,
    scan_output_axes=None,
    scan_output_directions=None,
):
    runner = ctx.subgraph("body")
    formal = ctx.num_inputs
    n_scan_in = num_scan_inputs
    n_state = formal - n_scan_in
    if n_state < 0 or len(runner.input_names) != formal:
        raise Fail(
            f"{ctx.describe()}: the body takes {len(runner.input_names)} inputs, the node "
            f"has {formal} with num_scan_inputs={n_scan_in}"
        )
    n_scan_out = len(runner.output_names) - n_state
    if n_scan_out < 0:
        raise Fail(f"{ctx.describe()}: the body has fewer outputs than the {n_state} state variables")
    in_axes = _axes(scan_input_axes, n_scan_in, 0, "scan_input_axes")
    in_dirs = _axes(scan_input_directions, n_scan_in, 0, "scan_input_directions")
    out_axes = _axes(scan_output_axes, n_scan_out, 0, "scan_output_axes")
    out_dirs = _axes(scan_output_directions, n_scan_out, 0, "scan_output_directions")
    what = ctx.describe()

    def run(*args):
        state = list(args[:n_state])
        outer = args[formal:]
        sliced = []
        length = None
        for x, axis, direction in zip(args[n_state:formal], in_axes, in_dirs):
            x = np.asarray(x)
            moved = np.moveaxis(x, _normalise_axis(axis, x.ndim, "scan_input_axes"), 0)
            if length is None:
                length = moved.shape[0]
            elif moved.shape[0] != length:
                raise InvalidArgument(f"Scan inputs have different sequence lengths {length} and {moved.shape[0]}")
            sliced.append(moved[::-1] if direction else moved)
        length = length or 0
        collected = [[] for _ in range(n_scan_out)]
        for t in range(length):
            check_terminate()
            outputs = runner([*state, *(s[t] for s in sliced)], outer)
            state = outputs[:n_state]
            for bucket, value in zip(collected, outputs[n_state:]):
                bucket.append(value)
        results = []
        for k, (bucket, axis, direction) in enumerate(zip(collected, out_axes, out_dirs)):
            if not bucket:
                stacked = _blank_output(body, n_state + k, (0,), what)
            else:
                stacked = _stack(bucket[::-1] if direction else bucket, what)
            axis = _normalise_axis(axis, stacked.ndim, "scan_output_axes")
            results.append(np.ascontiguousarray(np.moveaxis(stacked, 0, axis)) if axis else stacked)
        return (*state, *results)

    return run


@kernel("Scan", since=(8,), factory=True)
def scan_8(ctx, *, body, num_scan_inputs, directions=None):
    """Opset 8: every input has a leading batch axis, scan inputs scan their axis 1, and each
    batch entry may stop early at its ``sequence_lens``; outputs past it are zero."""
    runner = ctx.subgraph("body")
    formal = ctx.num_inputs
    n_scan_in = num_scan_inputs
    n_state = formal - 1 - n_scan_in
    if n_state < 0 or len(runner.input_names) != formal - 1:
        raise Fail(
            f"{ctx.describe()}: the body takes {len(runner.input_names)} inputs, the node "
            f"has {formal - 1} with num_scan_inputs={n_scan_in}"
        )
    n_scan_out = len(runner.output_names) - n_state
    dirs = _axes(directions, n_scan_in, 0, "directions")
    what = ctx.describe()

    def run(sequence_lens, *args):
        states = [np.asarray(s) for s in args[:n_state]]
        inputs = [np.asarray(x) for x in args[n_state : formal - 1]]
        outer = args[formal - 1 :]
        if not inputs:
            raise Fail(f"{what}: Scan-8 needs at least one scan input")
        batch, max_len = inputs[0].shape[0], inputs[0].shape[1]
        for x in inputs + states:
            if x.ndim < 1 or x.shape[0] != batch:
                raise InvalidArgument(f"Scan-8 inputs disagree on the batch size {batch}: shape {list(x.shape)}")
        for x in inputs:
            if x.ndim < 2 or x.shape[1] != max_len:
                raise InvalidArgument(f"Scan-8 scan inputs disagree on the sequence length {max_len}")
        if sequence_lens is None:
            lengths = [max_len] * batch
        else:
            lengths = [int(v) for v in np.asarray(sequence_lens).reshape(-1)]
            if len(lengths) != batch or any(not 0 <= v <= max_len for v in lengths):
                raise InvalidArgument(f"Scan-8 sequence_lens {lengths} do not fit batch {batch}, length {max_len}")
        final_states = [[] for _ in range(n_state)]
        per_batch = []
        for b in range(batch):
            state = [s[b] for s in states]
            steps = lengths[b]
            slices = [x[b, :steps][::-1] if d else x[b, :steps] for x, d in zip(inputs, dirs)]
            collected = [[] for _ in range(n_scan_out)]
            for t in range(steps):
                check_terminate()
                outputs = runner([*state, *(s[t] for s in slices)], outer)
                state = outputs[:n_state]
                for bucket, value in zip(collected, outputs[n_state:]):
                    bucket.append(value)
            for bucket, value in zip(final_states, state):
                bucket.append(value)
            per_batch.append(collected)
        results = [
            np.stack(bucket) if bucket else np.empty((0,) + s.shape[1:], s.dtype)
            for bucket, s in zip(final_states, states)
        ]
        for k in range(n_scan_out):
            template = next((c[k][0] for c in per_batch if c[k]), None)
            if template is None:
                results.append(_blank_output(body, n_state + k, (batch, max_len), what))
                continue
            out = np.zeros((batch, max_len) + np.shape(template), dtype=template.dtype)
            for b, collected in enumerate(per_batch):
                if collected[k]:
                    out[b, : len(collected[k])] = _stack(collected[k], what)
            results.append(out)
        return tuple(results)

    return run
