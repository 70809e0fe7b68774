"""`python -m serve.cli ...` is `eor ...`."""
import sys

from serve.cli import main

sys.exit(main())
