import sys

from fuzz.cli import main

sys.exit(main())
