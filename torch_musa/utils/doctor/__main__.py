import sys

from torch_musa.utils.doctor.cli import main

sys.exit(main())
