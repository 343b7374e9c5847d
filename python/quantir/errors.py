"""quantir's exceptions: one class per kind of failure, each with the command line's one-line
message (naming the file, the tensor and what was expected)."""


class QuantirError(Exception):
    """Any error quantir reports."""


class ConfigError(QuantirError, ValueError):
    """A request that asks for something that does not exist: an unknown option value, a bad
    recipe, a method that needs data it was not given."""


class ModelError(QuantirError):
    """A model that cannot be read, imported or written."""


class DataError(QuantirError, ValueError):
    """Calibration or evaluation data that do not fit the model: missing arrays, wrong dtype or
    shape, NaN/Inf, no samples."""


class CalibrationError(QuantirError):
    """Calibration failed (nothing to calibrate, a statistics observer's error)."""


class QuantizationError(QuantirError):
    """Rewriting the model failed."""


class EvaluationError(QuantirError):
    """Float and quantized models could not be compared."""


class StatsError(QuantirError):
    """A statistics file that cannot be read, or statistics of another model."""


class ExecutionError(QuantirError):
    """The interpreter could not run the model."""


class QuantirWarning(UserWarning):
    """Something quantir did that you may not expect (left float, clipped, ignored)."""
