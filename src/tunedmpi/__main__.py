import sys

from tunedmpi.cli import main

sys.exit(main())
