"""onnxplug's WASM execution provider (``WasmExecutionProvider``).

Float32 kernels written in C with ``wasm_simd128.h``, compiled to one WebAssembly module
(``kernels.wasm``, rebuilt by ``python -m onnxplug_wasm.build``) and run by wasmtime; the same
module runs in Node and browsers.  wasmtime is imported only when devices are listed or a
provider is created.  ``onnxplug_wasm.sandbox`` runs op libraries' wasm kernels with memory and
fuel limits.
"""

__version__ = "0.1.0"
