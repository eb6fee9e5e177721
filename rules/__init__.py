"""The static engine (`perflsp.rules`): one libcst parse per file, one shared context, one module per rule."""
