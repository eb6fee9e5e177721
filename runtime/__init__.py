"""perflsp.runtime: measure a marked function on the real device and say which ceiling binds.

Runs inside the user's own interpreter (torch, numpy; never pygls or libcst). The entry point is
`python -m perflsp.runtime profile|peaks ...` (`perflsp.runtime.cli.main`); the language server
spawns it and reads the JSON result file, never importing this package. Importing the package
imports nothing heavy: torch is loaded by the modules that measure.
"""
