"""Type hints of quantir's Python API (see quantir/__init__.py for the documentation)."""

import os
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from .errors import (
    CalibrationError as CalibrationError,
    ConfigError as ConfigError,
    DataError as DataError,
    EvaluationError as EvaluationError,
    ExecutionError as ExecutionError,
    ModelError as ModelError,
    QuantirError as QuantirError,
    QuantirWarning as QuantirWarning,
    QuantizationError as QuantizationError,
    StatsError as StatsError,
)

__version__: str

PathLike = Union[str, os.PathLike]
Arrays = Mapping[str, np.ndarray]

class CalibrationDataReader(Protocol):
    """onnxruntime's protocol: a dict of arrays per call, then None."""

    def get_next(self) -> Optional[Arrays]: ...

Calibration = Union[PathLike, Arrays, Iterable[Arrays], CalibrationDataReader]
Progress = Callable[[int, Optional[int]], Any]

class Stats:
    """Calibration statistics (what `quantir calibrate -o` writes)."""

    @staticmethod
    def load(path: PathLike) -> "Stats": ...
    def save(self, path: PathLike) -> None: ...
    def to_json(self) -> str: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def tensors(self) -> list[str]: ...
    @property
    def model_hash(self) -> str: ...
    def __len__(self) -> int: ...

class Summary:
    """What quantize did: the fields of `quantir quantize --json`."""

    output: str
    weights: str
    activations: str
    scheme: str
    ops: dict[str, Any]
    totals: dict[str, Any]
    quantized_ops: dict[str, int]
    left_float: list[dict[str, Any]]
    unknown_ops: dict[str, int]
    passes: dict[str, Any]
    stages: list[dict[str, Any]]
    target: Optional[dict[str, Any]]
    messages: list[str]
    warnings: list[str]
    @property
    def int8_mac_share(self) -> Optional[float]: ...
    def as_dict(self) -> dict[str, Any]: ...

def quantize(
    model: PathLike,
    output: PathLike,
    calibration: Optional[Calibration] = None,
    *,
    stats: Union[Stats, PathLike, None] = None,
    weights: Optional[str] = None,
    activations: Optional[str] = None,
    scheme: Optional[str] = None,
    runtime: Optional[str] = None,
    per_channel: bool = True,
    symmetric_activations: bool = False,
    quantize_outputs: bool = False,
    reduce_range: bool = False,
    exclude: Sequence[str] = (),
    config: Union[PathLike, Mapping[str, Any], None] = None,
    target_sqnr: Optional[float] = None,
    target_top1: Optional[float] = None,
    labels: Optional[str] = None,
    validation: Union[PathLike, Mapping[str, Any], None] = None,
    method: Optional[str] = None,
    percentile: Optional[float] = None,
    bins: int = 2048,
    choose_method: bool = False,
    candidates: Sequence[str] = ("minmax", "percentile", "mse"),
    shard: Union[Tuple[int, int], str, None] = None,
    skip_non_finite: bool = False,
    inputs: Optional[Mapping[str, str]] = None,
    threads: int = 0,
    limit: Optional[int] = None,
    image_size: Optional[Tuple[int, int]] = None,
    mean: Union[float, Sequence[float]] = 0.0,
    std: Union[float, Sequence[float]] = 1.0,
    layout: str = "nhwc",
    signature: Optional[str] = None,
    cache: bool = True,
    progress: Optional[Progress] = None,
    verbose: bool = False,
) -> Summary: ...
def calibrate(
    model: PathLike,
    calibration: Calibration,
    *,
    method: Optional[str] = None,
    percentile: Optional[float] = None,
    bins: int = 2048,
    shard: Union[Tuple[int, int], str, None] = None,
    onnx: bool = False,
    skip_non_finite: bool = False,
    inputs: Optional[Mapping[str, str]] = None,
    threads: int = 0,
    limit: Optional[int] = None,
    image_size: Optional[Tuple[int, int]] = None,
    mean: Union[float, Sequence[float]] = 0.0,
    std: Union[float, Sequence[float]] = 1.0,
    layout: str = "nhwc",
    signature: Optional[str] = None,
    progress: Optional[Progress] = None,
    verbose: bool = False,
) -> Stats: ...
def evaluate(
    float_model: PathLike,
    quant_model: PathLike,
    data: Union[PathLike, Arrays],
    *,
    labels: Optional[str] = None,
    per_layer: bool = False,
    report: Optional[PathLike] = None,
    inputs: Optional[Mapping[str, str]] = None,
    threads: int = 0,
    limit: Optional[int] = None,
    image_size: Optional[Tuple[int, int]] = None,
    mean: Union[float, Sequence[float]] = 0.0,
    std: Union[float, Sequence[float]] = 1.0,
    layout: str = "nhwc",
    signature: Optional[str] = None,
    runtime: Optional[str] = None,
    progress: Optional[Progress] = None,
) -> dict[str, Any]: ...
def run(
    model: PathLike, inputs: Arrays, *, function: Optional[str] = None, signature: Optional[str] = None
) -> dict[str, np.ndarray]: ...
def merge(parts: Sequence[Union[Stats, PathLike]]) -> Stats: ...
