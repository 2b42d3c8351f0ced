"""Defaults shared by every test folder of the repository.

A session created without ``providers=`` uses every installed provider, in priority order
(see ``docs/api.md``), so which plugins happen to be installed would change what most tests run
on.  The suite pins that default to the CPU provider through ``ONNXPLUG_PROVIDERS``, the
variable users set for the same purpose; set it yourself (``ONNXPLUG_PROVIDERS=openvino,cpu``)
to run the suite's default sessions on other providers.  Tests of the default selection itself
remove the variable with ``monkeypatch``.
"""

import os

os.environ.setdefault("ONNXPLUG_PROVIDERS", "CPUExecutionProvider")
