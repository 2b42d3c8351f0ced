"""An example onnxplug op library: string ops in the ``ai.onnxplug.text`` domain."""

__version__ = "0.1.0"

#: The custom domain of this library's ops.
DOMAIN = "ai.onnxplug.text"
