import sys

from jobpool.cli import main

sys.exit(main())
