"""JSON-RPC answers pygls leaves out: every request gets a response, even a malformed one.

pygls structures each message while it parses the JSON; when a request's params do not fit the
method's type it raises, its read loop logs the error, and the client waits for an answer forever.
Here such a request becomes a `Refused` message that is answered with InvalidParams (-32602) and a
message naming the field and what is wrong with it.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Union

import attrs
from cattrs.errors import ClassValidationError
from cattrs.v import format_exception, transform_error
from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger("perflsp.server")


@attrs.define
class Refused:
    """A request answered with `error` instead of being handled."""

    id: Union[int, str]
    method: str
    error: ResponseError
    jsonrpc: str = "2.0"


class PerflspProtocol(LanguageServerProtocol):
    def structure_message(self, data: Dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if not _is_request(data):
                raise  # a notification or response has nobody to answer: pygls logs and drops it
            method = data["method"]
            error = type(exc)(message=f"{exc.message} for {method}: {_what_is_wrong(exc.__cause__)}")
            log.warning("perflsp: refused request %s: %s", data["id"], error.message)
            return Refused(id=data["id"], method=method, error=error.to_response_error())

    def handle_message(self, message: Any) -> None:
        if isinstance(message, Refused):
            self._send_response(message.id, error=message.error)
        else:
            super().handle_message(message)


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
