"""``python -m torch_musa_converter``: the ``musa-converter`` command, started without torch."""
import sys

from torch_musa_converter import main

sys.exit(main())
