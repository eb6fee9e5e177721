import sys

from perflsp.cli import main

sys.exit(main())
