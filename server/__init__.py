"""The perflsp language server (pygls 2.x): a thin LSP shell over the static engine.

It never re-implements rules, configuration or suppression; it translates LSP requests into calls
of `perflsp.rules` and engine findings into LSP types. Importing this package is cheap: the
engine (libcst and the rules) is imported on first use, in a worker thread.
"""
