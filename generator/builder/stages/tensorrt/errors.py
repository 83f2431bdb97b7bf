"""Errors of the TensorRT package."""

from generator.errors import GeneratorError


class TensorRTError(GeneratorError):
    """Something about a TensorRT plan or its build is wrong."""


class TensorRTUnavailableError(TensorRTError):
    """This machine cannot build or check plans: TensorRT or an NVIDIA GPU is missing."""


class ProfileError(TensorRTError):
    """Optimization-profile shapes are impossible or disagree with the ONNX input."""


class BindingError(TensorRTError):
    """The engine's I/O tensors cannot be expressed as a Triton model config."""


class EngineBuildError(TensorRTError):
    """The TensorRT builder (or its child process) failed."""
