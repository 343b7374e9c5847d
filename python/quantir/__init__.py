"""quantir: post-training quantization on MLIR, from Python.

    import quantir
    summary = quantir.quantize("model.onnx", "model.int8.onnx", calibration=reader)
    print(summary)

The functions mirror the command line (``quantir quantize``, ``calibrate``, ``evaluate``,
``run``, ``merge``) and give byte-identical files for the same request. Calibration data can be
a path (``.npz``, a folder of ``.npy`` or of images), a dict of NumPy arrays (first axis =
samples), an iterable of dicts ``{input_name: array}`` (each one sample or a batch), or any
object with onnxruntime's ``CalibrationDataReader`` protocol (``get_next()`` returning a dict,
then ``None``). Streams are read once, in order, in bounded memory.

The work runs in Rust with the GIL released; Ctrl-C stops it with ``KeyboardInterrupt``.
"""

import json as _json
import os as _os
import sys as _sys
import warnings as _warnings

from . import _quantir
from ._quantir import Stats
from .errors import (
    CalibrationError,
    ConfigError,
    DataError,
    EvaluationError,
    ExecutionError,
    ModelError,
    QuantirError,
    QuantirWarning,
    QuantizationError,
    StatsError,
)

__version__ = _quantir.__version__

__all__ = [
    "quantize",
    "calibrate",
    "evaluate",
    "run",
    "merge",
    "Stats",
    "Summary",
    "QuantirError",
    "ConfigError",
    "ModelError",
    "DataError",
    "CalibrationError",
    "QuantizationError",
    "EvaluationError",
    "StatsError",
    "ExecutionError",
    "QuantirWarning",
]

# onnxruntime users say "runtime"; the scheme is the parameter arithmetic of that runtime
_RUNTIMES = {
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "ort": "onnx",
    "onnxruntime-vnni": "onnx",
    "onnxruntime-arm": "onnx",
    "generic": None,
    "mlir": "mlir",
    "tf": "mlir",
    "tensorflow": "mlir",
    "tflite": "mlir",
    "torch": "torch",
    "pytorch": "torch",
}


class Summary:
    """What ``quantize`` did: the fields of ``quantir quantize --json`` as attributes
    (``output``, ``weights``, ``activations``, ``scheme``, ``ops``, ``totals``,
    ``quantized_ops``, ``left_float``, ``unknown_ops``, ``passes``, ``stages``, ``target`` —
    what ``target_sqnr``'s or ``target_top1``'s search raised, or None), the lines the
    command line prints (``messages``; ``warnings`` are those starting with "warning: ") and
    the command line's text summary (``str(summary)``)."""

    def __init__(self, doc, messages, text):
        self._doc = doc
        self.messages = list(messages)
        self.warnings = [m[len("warning: "):] for m in messages if m.startswith("warning: ")]
        self._text = text
        for k, v in doc.items():
            setattr(self, k, v)

    def as_dict(self):
        """The ``quantize --json`` document."""
        return dict(self._doc)

    @property
    def int8_mac_share(self):
        return self._doc["totals"]["int8_mac_share"]

    def __str__(self):
        return self._text

    def __repr__(self):
        q = ", ".join(f"{n} {op}" for op, n in sorted(self.quantized_ops.items())) or "no compute op"
        return (
            f"Summary(output={self.output!r}, quantized {q}, "
            f"int8 MAC share {100 * (self.int8_mac_share or 0):.1f} %, "
            f"{len(self.left_float)} left float, {len(self.warnings)} warnings)"
        )


def _path(p, what):
    if isinstance(p, (str, bytes, _os.PathLike)):
        return _os.fspath(p)
    raise TypeError(f"{what}: expected a path (str or os.PathLike), got {type(p).__name__}")


def _opt_int(v, what, minimum):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{what}: expected an integer >= {minimum}, got {v!r}")
    return v


def _shard(s):
    if s is None:
        return None
    if isinstance(s, str):
        i, sep, n = s.partition("/")
        try:
            s = (int(i), int(n)) if sep else None
        except ValueError:
            s = None
    if (
        isinstance(s, (tuple, list))
        and len(s) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
        and 0 <= s[0] < s[1]
    ):
        return (s[0], s[1])
    raise ValueError(f"shard: expected (i, n) or 'i/n' with 0 <= i < n, got {s!r}")


def _floats(v, what):
    if isinstance(v, (int, float)):
        return [float(v)]
    try:
        return [float(x) for x in v]
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number or a sequence of numbers, got {v!r}") from None


def _calib_args(method, percentile, bins, shard, skip_non_finite, threads, limit, inputs, image_size, mean, std, layout):
    # method names are checked by the library, as the command line's are
    if method is not None and not isinstance(method, str):
        raise ValueError(f"method: expected a method name, got {method!r}")
    if percentile is not None and not (isinstance(percentile, (int, float)) and 0 < percentile <= 100):
        raise ValueError(f"percentile: expected a number in (0, 100], got {percentile!r}")
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        raise ValueError(f"inputs: expected a dict {{input name: array name}}, got {inputs!r}")
    if image_size is not None:
        if not (isinstance(image_size, (tuple, list)) and len(image_size) == 2 and all(isinstance(x, int) and x > 0 for x in image_size)):
            raise ValueError(f"image_size: expected (height, width), got {image_size!r}")
        image_size = tuple(image_size)
    if layout not in ("nhwc", "nchw"):
        raise ValueError(f"layout: expected 'nhwc' or 'nchw', got {layout!r}")
    return {
        "method": method,
        "percentile": None if percentile is None else float(percentile),
        "bins": _opt_int(bins, "bins", 1),
        "shard": _shard(shard),
        "skip_non_finite": bool(skip_non_finite),
        "threads": _opt_int(threads, "threads", 0),
        "limit": _opt_int(limit, "limit", 1),
        "inputs": sorted(inputs.items()),
        "image_size": image_size,
        "mean": _floats(mean, "mean"),
        "std": _floats(std, "std"),
        "layout": layout,
    }


def _progress(progress):
    if progress is not None and not callable(progress):
        raise ValueError(f"progress: expected a callable progress(done, total), got {progress!r}")
    return progress


def _say(lines, verbose):
    for line in lines:
        if line.startswith("warning: "):
            _warnings.warn(line[len("warning: "):], QuantirWarning, stacklevel=3)
        elif verbose:
            print(line, file=_sys.stderr)


def _calibration(c):
    # paths go as str; dicts, iterables and readers are read by the extension
    if isinstance(c, (str, bytes, _os.PathLike)):
        return _os.fspath(c)
    return c


def quantize(
    model,
    output,
    calibration=None,
    *,
    stats=None,
    weights=None,
    activations=None,
    scheme=None,
    runtime=None,
    per_channel=True,
    symmetric_activations=False,
    quantize_outputs=False,
    reduce_range=False,
    exclude=(),
    config=None,
    target_sqnr=None,
    target_top1=None,
    labels=None,
    validation=None,
    method=None,
    percentile=None,
    bins=2048,
    choose_method=False,
    choose_range=False,
    candidates=("minmax", "percentile", "mse"),
    shard=None,
    skip_non_finite=False,
    inputs=None,
    threads=0,
    limit=None,
    image_size=None,
    mean=0.0,
    std=1.0,
    layout="nhwc",
    signature=None,
    cache=True,
    progress=None,
    verbose=False,
):
    """Quantizes ``model`` (``.onnx``, ``.mlir``/``.mlirbc`` or a SavedModel folder) into
    ``output`` (``.onnx`` for QDQ ONNX, ``.mlir``/``.mlirbc``), as ``quantir quantize`` does.

    Statistics come from ``calibration`` (a path, a dict of arrays, an iterable of dicts or a
    ``CalibrationDataReader``) or ``stats`` (a :class:`Stats` or a statistics file); with
    neither, ``activations="none"`` quantizes the weights only. Every command-line option is a
    keyword: ``weights`` ("int8", "int4", "fp16", "bf16"), ``activations`` ("int8", "uint8",
    "int16", "none"),
    ``scheme`` or ``runtime`` ("onnx"/"onnxruntime", "onnxruntime-vnni", "mlir"/"tflite",
    "torch", "generic": the parameter arithmetic and, as ``quantir quantize --runtime``, the
    kernels the weights are made for; an ``.onnx`` output is made for onnxruntime on any x86
    CPU by default),
    ``per_channel``, ``exclude`` (op or tensor name patterns), ``config`` (a recipe file or
    the same as a dict), ``method`` ("minmax", "avg-minmax", "ema-minmax", "percentile", "percentile-symmetric",
    "entropy", "mse", "mse-symmetric"),
    ``choose_method`` (score ``candidates`` and keep the best), ``choose_range`` (each
    activation's own range among ``candidates``, scored at the ops reading it), ``target_sqnr`` (raise the
    fewest activations to int16, then float, until every output's SQNR on 16 calibration
    samples spread over the data (a stream keeps the same 16 as it is read) reaches it; ``Summary.target`` says which), ``target_top1`` (the same
    for top-1 on every scoring sample — from a stream, the 16 it keeps —: accuracy against the integer array ``labels`` names,
    else agreement with the float model), ``validation`` (held-out data, a path or a dict of
    arrays, the target is scored on instead of the calibration data), and so on.

    Returns a :class:`Summary`; warnings are issued as :class:`QuantirWarning`.
    """
    model, output = _path(model, "model"), _path(output, "output")
    if scheme is not None and runtime is not None:
        raise ValueError("give scheme or runtime, not both")
    if runtime is not None:
        if runtime not in _RUNTIMES:
            raise ValueError(f"runtime: expected one of {', '.join(sorted(_RUNTIMES))}, got {runtime!r}")
        scheme = _RUNTIMES[runtime]
        # and the kernels the weights are made for (`quantir quantize --runtime`): onnxruntime's
        # u8s8 GEMM on x86 for onnxruntime, full-range weights for the others
        deploy = {"onnx": "onnxruntime", "ort": "onnxruntime", "onnxruntime": "onnxruntime",
                  "onnxruntime-vnni": "onnxruntime-vnni", "onnxruntime-arm": "onnxruntime-vnni"}.get(runtime, "generic")
    else:
        deploy = None
    if isinstance(exclude, str) or not all(isinstance(e, str) for e in exclude):
        raise ValueError(f"exclude: expected a list of name patterns, got {exclude!r}")
    config_path = config_json = None
    if isinstance(config, dict):
        config_json = _json.dumps(config)
    elif config is not None:
        config_path = _path(config, "config")
    stats_obj = stats_path = None
    if isinstance(stats, Stats):
        stats_obj = stats
    elif stats is not None:
        stats_path = _path(stats, "stats")
    if stats is not None and calibration is not None:
        raise ValueError("give calibration or stats, not both")
    if choose_method and choose_range:
        raise ValueError("give choose_method or choose_range, not both")
    choose = "choose_method" if choose_method else "choose_range" if choose_range else None
    if choose:
        if calibration is None:
            raise ValueError(f"{choose} needs calibration data")
        if method is not None:
            raise ValueError(f"give method or {choose}, not both")
        if isinstance(candidates, str) or not candidates or not all(isinstance(c, str) for c in candidates):
            raise ValueError(f"candidates: expected a list of method names, got {candidates!r}")
    if target_sqnr is not None:
        if isinstance(target_sqnr, bool) or not isinstance(target_sqnr, (int, float)):
            raise ValueError(f"target_sqnr: expected a number of dB, got {target_sqnr!r}")
        if calibration is None:
            raise ValueError("target_sqnr needs calibration data to score on")
    if target_top1 is not None:
        if target_sqnr is not None:
            raise ValueError("give target_sqnr or target_top1, not both")
        if isinstance(target_top1, bool) or not isinstance(target_top1, (int, float)) or not 0 < target_top1 <= 1:
            raise ValueError(f"target_top1: expected a fraction in (0, 1], got {target_top1!r}")
        if calibration is None:
            raise ValueError("target_top1 needs calibration data to score on")
    if labels is not None and target_top1 is None:
        raise ValueError("labels serve target_top1 only")
    if validation is not None and target_sqnr is None and target_top1 is None:
        raise ValueError("validation data serve target_sqnr or target_top1 only")
    recipe = {
        "target_sqnr": None if target_sqnr is None else float(target_sqnr),
        "target_top1": None if target_top1 is None else float(target_top1),
        "labels": labels,
        "config_path": config_path,
        "config_json": config_json,
        "scheme": scheme,
        "weights": weights,
        "activations": activations,
        "per_channel": bool(per_channel),
        "symmetric_activations": bool(symmetric_activations),
        "quantize_outputs": bool(quantize_outputs),
        "reduce_range": bool(reduce_range),
        "runtime": deploy,
        "exclude": list(exclude),
    }
    calib = _calib_args(method, percentile, bins, shard, skip_non_finite, threads, limit, inputs, image_size, mean, std, layout)
    text, lines = _quantir.quantize(
        model,
        output,
        _Obj(recipe),
        _Obj(calib),
        calibration=None if calibration is None else _calibration(calibration),
        validation=None if validation is None else _calibration(validation),
        stats=stats_obj,
        stats_path=stats_path,
        candidates=list(candidates) if choose else None,
        per_point=bool(choose_range),
        signature=signature,
        cache=bool(cache),
        progress=_progress(progress),
    )
    *lines, report = lines
    _say(lines, verbose)
    return Summary(_json.loads(text), lines, report)


def calibrate(
    model,
    calibration,
    *,
    method=None,
    percentile=None,
    bins=2048,
    shard=None,
    onnx=False,
    skip_non_finite=False,
    inputs=None,
    threads=0,
    limit=None,
    image_size=None,
    mean=0.0,
    std=1.0,
    layout="nhwc",
    signature=None,
    progress=None,
    verbose=False,
):
    """Statistics of ``model`` on ``calibration``, as ``quantir calibrate`` computes them
    (``onnx=True`` for statistics of the ONNX form of a TF model, for an ``.onnx`` output).
    ``shard=(i, n)`` calibrates samples i, i + n, …; :func:`merge` joins the shards.
    Returns :class:`Stats` (``.save(path)`` writes what ``quantir calibrate -o`` writes)."""
    model = _path(model, "model")
    calib = _calib_args(method, percentile, bins, shard, skip_non_finite, threads, limit, inputs, image_size, mean, std, layout)
    stats, lines = _quantir.calibrate(
        model, _calibration(calibration), _Obj(calib), signature=signature, onnx=bool(onnx), progress=_progress(progress)
    )
    _say(lines, verbose)
    return stats


def evaluate(
    float_model,
    quant_model,
    data,
    *,
    labels=None,
    per_layer=False,
    report=None,
    inputs=None,
    threads=0,
    limit=None,
    image_size=None,
    mean=0.0,
    std=1.0,
    layout="nhwc",
    signature=None,
    runtime=None,
    progress=None,
):
    """Float against quantized on ``data`` (a path or a dict of arrays): the dict
    ``quantir evaluate --json`` prints — per output SQNR and cosine, top-1 agreement, accuracy
    against the integer array ``labels``, and with ``per_layer`` every tensor both models
    compute, worst first. ``report=path`` writes the HTML page too. ``runtime="onnxruntime"``
    computes the quantized model as onnxruntime's default level does on x86 CPUs without VNNI
    (int16 pair saturation; ``simulated_onnxruntime_x86`` in the result names the ops where it
    saturated); the default, ``"generic"``, accumulates exactly."""
    float_model, quant_model = _path(float_model, "float_model"), _path(quant_model, "quant_model")
    if labels is not None and not isinstance(labels, str):
        raise ValueError(f"labels: expected the name of an array in data, got {labels!r}")
    calib = _calib_args(None, None, 2048, None, False, threads, limit, inputs, image_size, mean, std, layout)
    text = _quantir.evaluate(
        float_model,
        quant_model,
        _calibration(data),
        _Obj(calib),
        labels=labels,
        per_layer=bool(per_layer),
        report=None if report is None else _path(report, "report"),
        signature=signature,
        runtime=runtime,
        progress=_progress(progress),
    )
    return _json.loads(text)


def run(model, inputs, *, function=None, signature=None):
    """Runs ``model`` once in quantir's interpreter on ``inputs`` (``{input name: array}``, each
    the whole input tensor, batch dim included; a one-input model takes any name). Returns
    ``{output name: array}``; the outputs are handed to NumPy without a copy."""
    if not isinstance(inputs, dict):
        raise ValueError(f"inputs: expected a dict {{input name: array}}, got {type(inputs).__name__}")
    return _quantir.run(_path(model, "model"), inputs, function=function, signature=signature)


def merge(parts):
    """Statistics of shards (``Stats`` objects or files) merged in the order given, as
    ``quantir merge`` does."""
    parts = [p if isinstance(p, Stats) else _path(p, "merge") for p in parts]
    return _quantir.merge(parts)


class _Obj:
    """Keyword groups handed to the extension as attributes."""

    def __init__(self, d):
        self.__dict__.update(d)
