"""The TensorRT plan path: build a plan from a precision ONNX on the GPU that will serve it.

Nothing here imports ``tensorrt`` at module level; the modules that need it import it inside the
functions that use it, so the CLI, the pure helpers and their tests work on machines without it.
"""
