"""``onnxplug serve MODEL``: the model behind the Open Inference Protocol v2 on HTTP.

A session with the given providers, a :class:`~onnxplug.serving.BatchScheduler` in front of it and
the starlette app of :mod:`onnxplug.serving.app` on uvicorn.  The socket is bound before the
server starts so that ``--port 0`` works (the chosen port is printed); Ctrl-C or SIGTERM stops
taking connections, finishes the requests in flight and exits with status 0.  Needs the ``serve`` extra.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys

from ..runtime import InferenceSession


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="serve a model over HTTP (Open Inference Protocol v2, dynamic batching)")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    parser.add_argument("--providers", default="", help="comma-separated provider names, highest priority first")
    parser.add_argument("--name", default=None, help="the model's name in URLs (default: the file name's stem)")
    parser.add_argument(
        "--max-batch-size", type=int, default=8, help="most rows combined into one run (1: no batching; default 8)"
    )
    parser.add_argument(
        "--max-queue-delay-ms",
        type=float,
        default=5.0,
        help="how long the oldest request waits for others to join its batch (default 5)",
    )
    parser.add_argument("--max-queue-size", type=int, default=1024, help="queued requests before 503 (default 1024)")
    parser.add_argument("--workers", type=int, default=1, help="threads running batches concurrently (default 1)")
    parser.add_argument("--timeout-s", type=float, default=None, help="default per-request timeout in seconds")
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body accepted (default 64)")
    parser.add_argument("--log-level", default="warning", help="uvicorn's log level (default: warning)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..serving.app import create_app
    except ImportError as error:
        print(
            f"onnxplug serve needs the serve extra (pip install 'onnxplug[serve]'): {error.name} is missing",
            file=sys.stderr,
        )
        return 1
    from ..serving import BatchScheduler

    names = [p.strip() for p in args.providers.split(",") if p.strip()] or None
    session = InferenceSession(args.model, providers=names)
    name = args.name or os.path.splitext(os.path.basename(args.model))[0]
    scheduler = BatchScheduler(
        session,
        max_batch_size=args.max_batch_size,
        max_queue_delay_ms=args.max_queue_delay_ms,
        max_queue_size=args.max_queue_size,
        workers=args.workers,
        timeout_s=args.timeout_s,
    )
    app = create_app(scheduler, name, max_body_bytes=int(args.max_body_mb * 1024 * 1024))
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)  # connections queue from here on, even before uvicorn's loop runs
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"serving {name} ({', '.join(session.get_providers())}) on http://{shown}:{port}", flush=True)
    print(
        f"batching: {scheduler.batching} (max batch {scheduler.max_batch_size}, "
        f"delay {args.max_queue_delay_ms} ms, {args.workers} worker(s))",
        flush=True,
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, lifespan="on"))
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again: stopping is
    # this command's normal end, so both become KeyboardInterrupt here and exit 0.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
        if not scheduler.closed:
            scheduler.shutdown(drain=False)
    print(f"stopped serving {name}", flush=True)
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
