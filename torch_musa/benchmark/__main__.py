import sys

from torch_musa.benchmark.cli import main

sys.exit(main())
