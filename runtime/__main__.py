"""`python -m perflsp.runtime profile|peaks ...`: the entry the language server spawns."""
import sys

from perflsp.runtime.cli import main

sys.exit(main())
