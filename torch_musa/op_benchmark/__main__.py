import sys

from torch_musa.op_benchmark.cli import main

sys.exit(main())
