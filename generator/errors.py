"""Exception tree of the generator: the CLI catches ``GeneratorError`` and prints one line."""


class GeneratorError(Exception):
    """A problem the user can fix; the message says how."""


class ModelInspectionError(GeneratorError):
    """The ONNX file is missing, invalid, or not a supported detector."""


class ConfigError(GeneratorError):
    """A rendered Triton config is invalid or the ensemble wiring does not agree."""


class RepositoryWriteError(GeneratorError):
    """The model repository could not be written (existing data, permissions...)."""


class ServerError(GeneratorError):
    """The embedded Triton server could not be fetched, started, or stopped."""
