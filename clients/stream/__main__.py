import sys

from clients.stream.cli import main

sys.exit(main())
