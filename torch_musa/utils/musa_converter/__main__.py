"""``python -m torch_musa.utils.musa_converter``: same as the ``musa-converter`` command."""
import sys

from torch_musa.utils.musa_converter.cli import main

sys.exit(main())
