"""Errors of the precision package."""

from generator.errors import GeneratorError


class PrecisionError(GeneratorError):
    """A precision conversion could not be done or produced an invalid graph."""


class CalibrationError(PrecisionError):
    """INT8 calibration data is missing, empty, or does not fit the model input."""
