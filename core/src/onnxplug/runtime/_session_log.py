"""A session's logging: its logger, named and levelled as onnxruntime's session options say, and
the report of what its creation chose."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .options import SessionOptions

__all__ = ["SEVERITY_LEVELS", "log_creation", "session_logger"]

#: onnxruntime's severities (0 verbose ... 4 fatal) as logging levels.
SEVERITY_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.CRITICAL}


def session_logger(options: SessionOptions) -> logging.Logger:
    """The session's logger, ``onnxplug.session.<logid>`` (``SessionOptions.logid``, else
    ``session``); ``log_severity_level`` 0-4 sets its level (verbose, info, warning, error,
    fatal), -1 leaves it to the ``onnxplug`` logger (``onnxplug.set_default_logger_severity``)."""
    logger = logging.getLogger(f"onnxplug.session.{options.logid or 'session'}")
    if options.log_severity_level in SEVERITY_LEVELS:
        logger.setLevel(SEVERITY_LEVELS[options.log_severity_level])
    return logger


def log_creation(logger: logging.Logger, source: str, providers, counts, inlined: int, copies: int) -> None:
    """Report the session's providers and partition at INFO (the caller asks whether INFO is on
    first: the counts cost a pass over the plan)."""
    logger.info(
        "session for %s: providers %s, nodes per provider %s, %d inlined, %d copies",
        source,
        providers,
        counts,
        inlined,
        copies,
    )
