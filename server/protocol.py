"""pygls' protocol, put right where it departs from JSON-RPC and LSP.

Every request gets a response, even a malformed or early one. pygls structures each message while
it parses the JSON; when a request's params do not fit the method's type it raises, its read loop
logs the error, and the client waits for an answer forever. Here such a request becomes a
`Refused` message that is answered with InvalidParams (-32602) and a message naming the field and
what is wrong with it.

The LSP lifecycle, as the specification words it: before `initialize` a request is answered with
ServerNotInitialized (-32002) and a notification is dropped, except `exit`; after `shutdown` a
request is answered with InvalidRequest (-32600). pygls would run the handler before `initialize`
(an internal error with a traceback) and answer nothing after `shutdown`.

Document edits are applied as LSP defines lines and positions (`convert.apply_change`). pygls
splits lines where `str.splitlines` does, at form feeds and U+2028 too, and puts a position past
the end of the last line one character short: its copy of the text drifts from the client's.
"""
from __future__ import annotations

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


@attrs.define
class Refused:
    """A request answered with `error` instead of being handled."""

    id: Union[int, str]
    method: str
    error: T.ResponseError
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
        refusal = self._out_of_order(method) if method not in (None, T.EXIT) else None
        if refusal is None:
            if method == T.INITIALIZE:
                self.initialize_received = True
            super().handle_message(message)
        elif isinstance(message, RPCRequest):
            self._send_response(message.id, error=refusal.to_response_error())
        else:
            log.debug("perflsp: dropped %s: %s", method, refusal.message)

    def _out_of_order(self, method: str) -> Optional[JsonRpcException]:
        """Why `method` may not run now, or None when it may."""
        if not self.initialize_received and method != T.INITIALIZE:
            return JsonRpcServerNotInitialized(message=f"{method}: the server is not initialized yet")
        if self._shutdown:
            return JsonRpcInvalidRequest(message=f"{method}: the server is shutting down (only exit may follow)")
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
