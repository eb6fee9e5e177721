"""Server and engine logs sent to the client as `window/logMessage`, filtered by the `logLevel` setting.

Records come from the event loop and from worker threads; the message is always written from the
event loop's thread (the connection is not thread-safe).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

from lsprotocol import types as T

from perflsp.server.settings import LOG_LEVELS

_TYPES = [(logging.ERROR, T.MessageType.Error), (logging.WARNING, T.MessageType.Warning),
          (logging.INFO, T.MessageType.Info), (logging.DEBUG, T.MessageType.Log)]


class ClientLogHandler(logging.Handler):
    def __init__(self, send: Callable[[T.LogMessageParams], None]):
        super().__init__(level=logging.INFO)
        self.send = send
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.setFormatter(logging.Formatter("%(message)s"))

    def set_level_name(self, name: str) -> None:
        level = LOG_LEVELS.get(name, logging.INFO)
        self.setLevel(level)
        logging.getLogger("perflsp").setLevel(level)  # records below the level are never built

    def emit(self, record: logging.LogRecord) -> None:
        if self.loop is None or self.loop.is_closed():
            return
        kind = next(t for level, t in _TYPES if record.levelno >= level or level == logging.DEBUG)
        try:
            params = T.LogMessageParams(type=kind, message=self.format(record))
            self.loop.call_soon_threadsafe(self._send_quietly, params)
        except RuntimeError:  # the loop closed between the check and the call (exit)
            pass

    def _send_quietly(self, params: T.LogMessageParams) -> None:
        try:
            self.send(params)
        except Exception:  # a log line must never take the server down (e.g. the pipe closed)
            pass


def install(send: Callable[[T.LogMessageParams], None]) -> ClientLogHandler:
    """Route the `perflsp` loggers (server and engine) to the client."""
    handler = ClientLogHandler(send)
    logger = logging.getLogger("perflsp")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # stdout is the protocol stream; stderr stays for pygls' own errors
    return handler
