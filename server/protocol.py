"""pygls' protocol, put right where it departs from JSON-RPC and LSP.

Every request gets a response, even a malformed or early one. pygls structures each message while
it parses the JSON; when a request's params do not fit the method's type it raises, its read loop
logs the error, and the client waits for an answer forever. Here such a request becomes a
`Refused` message that is answered with InvalidParams (-32602) and a message naming the field and
what is wrong with it. A request whose id is not a number or a string (`[1]`, `{}`, `true`, null)
is answered with InvalidRequest (-32600) and `"id": null`, as JSON-RPC 2.0 says, and never runs:
pygls would run it (`"id": true` on `shutdown` shut the server down) and then fail on the id.

The LSP lifecycle, as the specification words it: before `initialize` a request is answered with
ServerNotInitialized (-32002) and a notification is dropped, except `exit`; after `shutdown` a
request is answered with InvalidRequest (-32600), and so is a second `initialize` ("may only be sent
once"). pygls would run the handler before `initialize` (an internal error with a traceback),
answer nothing after `shutdown`, and start a new workspace on a second `initialize`, forgetting
every open document.

Document edits are applied as LSP defines lines and positions (`convert.apply_change`). pygls
splits lines where `str.splitlines` does, at form feeds and U+2028 too, and puts a position past
the end of the last line one character short: its copy of the text drifts from the client's.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, Generator, Optional, Sequence, Union
from urllib.parse import unquote

import attrs
from cattrs.errors import ClassValidationError
from cattrs.v import format_exception, transform_error
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException, JsonRpcInvalidRequest, JsonRpcServerNotInitialized
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import RPCRequest

from perflsp.server.convert import Encoder, apply_change

log = logging.getLogger("perflsp.server")


MsgId = Union[int, float, str]


@attrs.define
class Refused:
    """A request answered with `error` instead of being handled."""

    id: Optional[MsgId]  # None: the request's own id is not a valid one
    method: str
    error: T.ResponseError
    jsonrpc: str = "2.0"


class PerflspProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.initialize_received = False

    def structure_message(self, data: Dict[str, Any]) -> Any:
        if "jsonrpc" in data and _is_request(data) and not _valid_id(data["id"]):
            return self.refusal(data, JsonRpcInvalidRequest(
                message=f"{data['method']}: a request's id must be a number or a string, not {_kind(data['id'])}"))
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method", "a response")
            error = type(exc)(message=f"{exc.message} for {method}: {_what_is_wrong(exc.__cause__)}")
            refused = self.refusal(data, error)
            if refused is None:
                raise error from exc.__cause__  # nobody waits for an answer: the reader logs and drops it
            return refused

    def refusal(self, data: Dict[str, Any], error: JsonRpcException) -> Optional[Refused]:
        """`error` as the answer to `data` when it is a request; None when it is not (nobody waits for one)."""
        if not _is_request(data):
            return None
        msg_id = data["id"] if _valid_id(data["id"]) else None
        log.warning("perflsp: refused request %s: %s", json.dumps(msg_id), error.message)
        return Refused(id=msg_id, method=str(data["method"]), error=error.to_response_error())

    def handle_message(self, message: Any) -> None:
        if isinstance(message, Refused):
            self._send_error(message.id, message.error)
            return
        method = getattr(message, "method", None)  # None: a response to one of our requests
        refusal = self._out_of_order(method) if method not in (None, T.EXIT) else None
        if refusal is None:
            if method == T.INITIALIZE:
                self.initialize_received = True
            super().handle_message(message)
        elif isinstance(message, RPCRequest):
            self._send_error(message.id, refusal.to_response_error())
        else:
            log.debug("perflsp: dropped %s: %s", method, refusal.message)

    def _send_error(self, msg_id: Optional[MsgId], error: T.ResponseError) -> None:
        # Sent as a plain object: lsprotocol leaves a None id out, and JSON-RPC wants `"id": null`.
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": self._converter.unstructure(error)})

    def _out_of_order(self, method: str) -> Optional[JsonRpcException]:
        """Why `method` may not run now, or None when it may."""
        if not self.initialize_received:
            if method == T.INITIALIZE:
                return None
            return JsonRpcServerNotInitialized(message=f"{method}: the server is not initialized yet")
        if self._shutdown:
            return JsonRpcInvalidRequest(message=f"{method}: the server is shutting down (only exit may follow)")
        if method == T.INITIALIZE:
            return JsonRpcInvalidRequest(message="initialize: the server is already initialized "
                                                 "(LSP allows one initialize per session)")
        return None

    # --- document sync ----------------------------------------------------------------------------

    @lsp_method(T.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: T.DidChangeTextDocumentParams) -> Generator[Any, Any, None]:
        self._apply(params.text_document, params.content_changes)
        yield from self._server_handler(T.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(T.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: T.DidChangeNotebookDocumentParams) -> Generator[Any, Any, None]:
        cells = params.change.cells
        if cells is None or not cells.text_content:
            self.workspace.update_notebook_document(params)
        else:  # pygls applies the cells' structure and metadata, the cells' text is applied here
            self.workspace.update_notebook_document(attrs.evolve(params, change=attrs.evolve(
                params.change, cells=attrs.evolve(cells, text_content=None))))
            for content in cells.text_content:
                self._apply(content.document, content.changes)
        yield from self._server_handler(T.NOTEBOOK_DOCUMENT_DID_CHANGE, params)

    def _apply(self, document: T.VersionedTextDocumentIdentifier,
               changes: Sequence[T.TextDocumentContentChangeEvent]) -> None:
        # Only for documents the client opened: pygls would read a never-opened URI from disk,
        # and `file:///dev/zero` never ends.
        doc = self.workspace.text_documents.get(unquote(document.uri))
        if doc is None:
            log.warning("perflsp: ignored a change to %s, which the client never opened", document.uri)
            return
        text = doc.source
        encoder = Encoder(self.workspace.position_encoding)
        for change in changes:
            text = apply_change(text, change, encoder)
        self.workspace.update_text_document(document, T.TextDocumentContentChangeWholeDocument(text=text))

    def _server_handler(self, method: str, params: Any) -> Generator[Any, Any, None]:
        # pygls' builtin handlers run the server's own handler of the method through their generator.
        handler = self.fm.features.get(method)
        if handler is not None:
            yield handler, (params,), None


def _is_request(data: Dict[str, Any]) -> bool:
    return "method" in data and "id" in data


def _valid_id(msg_id: Any) -> bool:
    """JSON-RPC ids are numbers or strings (LSP: integers or strings); a bool is neither."""
    return isinstance(msg_id, (int, float, str)) and not isinstance(msg_id, bool)


def _kind(value: Any) -> str:
    """A JSON value as a message names it: `an array`, `an object`, or the value itself (`true`, `null`)."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return json.dumps(value)


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
