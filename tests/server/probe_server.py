"""The real server plus one request the tests use to read its copy of a document.

`perflsp/test/documentText` with `{"uri": ...}` answers the text the server holds for that
document, so a test can compare it with what the client holds.
"""
from perflsp.server import transport
from perflsp.server.app import create_server

server = create_server()


@server.feature("perflsp/test/documentText")
def document_text(ls, params):
    return ls.workspace.get_text_document(params.uri).source


transport.start_io(server)
