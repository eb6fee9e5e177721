"""JSON-RPC answers pygls leaves out: every request gets a response, even a malformed or early one.

pygls structures each message while it parses the JSON; when a request's params do not fit the
method's type it raises, its read loop logs the error, and the client waits for an answer forever.
Here such a request becomes a `Refused` message that is answered with InvalidParams (-32602) and a
message naming the field and what is wrong with it.

The LSP lifecycle, as the specification words it: before `initialize` a request is answered with
ServerNotInitialized (-32002) and a notification is dropped, except `exit`; after `shutdown` a
request is answered with InvalidRequest (-32600). pygls would run the handler before `initialize`
(an internal error with a traceback) and answer nothing after `shutdown`.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Union

import attrs
from cattrs.errors import ClassValidationError
from cattrs.v import format_exception, transform_error
from lsprotocol.types import EXIT, INITIALIZE, ResponseError
from pygls.exceptions import JsonRpcException, JsonRpcInvalidRequest, JsonRpcServerNotInitialized
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCRequest

log = logging.getLogger("perflsp.server")


@attrs.define
class Refused:
    """A request answered with `error` instead of being handled."""

    id: Union[int, str]
    method: str
    error: ResponseError
    jsonrpc: str = "2.0"


class PerflspProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.initialize_received = False

    def structure_message(self, data: Dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method", "a response")
            error = type(exc)(message=f"{exc.message} for {method}: {_what_is_wrong(exc.__cause__)}")
            if not _is_request(data):
                raise error from exc.__cause__  # nobody waits for an answer: the reader logs and drops it
            log.warning("perflsp: refused request %s: %s", data["id"], error.message)
            return Refused(id=data["id"], method=method, error=error.to_response_error())

    def handle_message(self, message: Any) -> None:
        if isinstance(message, Refused):
            self._send_response(message.id, error=message.error)
            return
        method = getattr(message, "method", None)  # None: a response to one of our requests
        refusal = self._out_of_order(method) if method not in (None, EXIT) else None
        if refusal is None:
            if method == INITIALIZE:
                self.initialize_received = True
            super().handle_message(message)
        elif isinstance(message, RPCRequest):
            self._send_response(message.id, error=refusal.to_response_error())
        else:
            log.debug("perflsp: dropped %s: %s", method, refusal.message)

    def _out_of_order(self, method: str) -> Optional[JsonRpcException]:
        """Why `method` may not run now, or None when it may."""
        if not self.initialize_received and method != INITIALIZE:
            return JsonRpcServerNotInitialized(message=f"{method}: the server is not initialized yet")
        if self._shutdown:
            return JsonRpcInvalidRequest(message=f"{method}: the server is shutting down (only exit may follow)")
        return None


def _is_request(data: Dict[str, Any]) -> bool:
    msg_id = data.get("id")
    return "method" in data and isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)


def _what_is_wrong(cause: Optional[BaseException]) -> str:
    if isinstance(cause, ClassValidationError):
        return "; ".join(transform_error(cause, format_exception=_describe))
    return str(cause)


def _describe(exc: BaseException, type_: Optional[type]) -> str:
    # lsprotocol's validators name the field and its range ("Position.line should be in range
    # [0:2147483647], but was -1."); cattrs' default wording would say only "invalid value".
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    return format_exception(exc, type_)
