"""``python -m onnxplug``: the ``onnxplug`` command."""

import sys

from .cli import main

sys.exit(main())
