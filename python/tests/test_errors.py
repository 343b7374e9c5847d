"""Bad input of each kind raises the quantir exception of its kind with the command line's
one-line message, writes nothing, and never lets a Rust panic through."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import quantir


def one_line(e):
    msg = str(e.value)
    assert "\n" not in msg and msg, msg
    return msg


def test_missing_and_broken_models(tmp_path, digits):
    with pytest.raises(quantir.ModelError) as e:
        quantir.quantize(tmp_path / "nope.onnx", tmp_path / "o.onnx", calibration=digits["calib"])
    assert "nope.onnx: cannot read" in one_line(e)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(quantir.ModelError) as e:
        quantir.quantize(bad, tmp_path / "o.onnx", calibration=digits["calib"])
    assert "bad.onnx" in one_line(e)
    with pytest.raises(quantir.ModelError) as e:
        quantir.quantize(digits["mlir"], tmp_path / "o.txt", calibration=digits["calib"])
    assert "unknown output format" in one_line(e)
    assert not (tmp_path / "o.onnx").exists() and not (tmp_path / "o.txt").exists()


def test_output_over_input_is_refused(tmp_path, digits):
    m = tmp_path / "m.mlir"
    m.write_bytes(digits["mlir"].read_bytes())
    with pytest.raises(quantir.QuantirError) as e:
        quantir.quantize(m, m, calibration=digits["calib"])
    one_line(e)
    assert m.read_bytes() == digits["mlir"].read_bytes()


def test_data_that_do_not_fit(tmp_path, digits):
    x = digits["x"]
    cases = {
        "float64": ({"x": x.astype(np.float64)}, "no array for input 'input'"),
        "shape": ({"x": x[:, :4]}, "input 'input'"),
        "nan": ({"x": np.where(np.arange(x.size).reshape(x.shape) == 7, np.nan, x).astype(np.float32)}, "non-finite"),
        "empty dict": ({}, "no arrays"),
        "no samples": ({"x": x[:0]}, "no samples"),
    }
    for kind, (data, says) in cases.items():
        with pytest.raises(quantir.DataError) as e:
            quantir.quantize(digits["mlir"], tmp_path / "o.mlir", calibration=data)
        assert says in one_line(e), kind
    with pytest.raises(quantir.DataError) as e:
        quantir.calibrate(digits["mlir"], ({"x": s.astype(np.float64)} for s in x))
    assert "calibration item 0" in one_line(e)
    assert not (tmp_path / "o.mlir").exists()


def test_streams_that_go_wrong(digits):
    with pytest.raises(quantir.CalibrationError, match="no samples"):
        quantir.calibrate(digits["mlir"], iter([]))
    with pytest.raises(ValueError, match="calibration item 2: expected a dict"):
        quantir.calibrate(digits["mlir"], iter([{"x": digits["x"][0]}] * 2 + [digits["x"][0]]))
    with pytest.raises(ValueError, match="calibration: expected a path"):
        quantir.calibrate(digits["mlir"], 42)

    def failing():
        yield {"x": digits["x"][0]}
        raise RuntimeError("the pipeline broke")

    # the user's own exception comes back as it was raised
    with pytest.raises(RuntimeError, match="the pipeline broke"):
        quantir.calibrate(digits["mlir"], failing())

    class Reader:
        def get_next(self):
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        quantir.quantize(digits["mlir"], "/tmp/never.mlir", calibration=Reader())
    with pytest.raises(ValueError, match="not a stream"):
        quantir.quantize(digits["mlir"], "/tmp/never.mlir", calibration=iter([]), choose_method=True)
    with pytest.raises(ValueError, match="not a stream"):
        quantir.evaluate(digits["mlir"], digits["mlir"], iter([]))


def test_options_that_do_not_exist(tmp_path, digits):
    q = lambda **kw: quantir.quantize(digits["mlir"], tmp_path / "o.mlir", calibration=digits["calib"], **kw)
    with pytest.raises(quantir.ConfigError, match="weights: expected"):
        q(weights="int9")
    with pytest.raises(quantir.ConfigError, match="activations"):
        q(activations="int3")
    with pytest.raises(quantir.ConfigError, match="unknown calibration method .magic."):
        q(method="magic")
    with pytest.raises(ValueError, match="runtime: expected one of"):
        q(runtime="tensorrt")
    with pytest.raises(ValueError, match="shard"):
        q(shard=(3, 2))
    with pytest.raises(ValueError, match="threads"):
        q(threads=-1)
    with pytest.raises(ValueError, match="progress"):
        q(progress="yes")
    with pytest.raises(quantir.ConfigError, match="unknown field"):
        q(config={"wieghts": "int8"})
    with pytest.raises(quantir.ConfigError, match="needs statistics or calibration data"):
        quantir.quantize(digits["mlir"], tmp_path / "o.mlir")
    with pytest.raises(ValueError, match="target_sqnr: expected a number"):
        q(target_sqnr="high")
    with pytest.raises(quantir.QuantirError, match="target 90 dB is out of reach"):
        q(target_sqnr=90)
    with pytest.raises(ValueError, match="target_top1: expected a fraction"):
        q(target_top1=1.5)
    with pytest.raises(ValueError, match="not both"):
        q(target_sqnr=30, target_top1=0.9)
    with pytest.raises(ValueError, match="validation data serve target_sqnr or target_top1 only"):
        q(validation=digits["test"])
    with pytest.raises(TypeError):
        q(no_such_option=1)
    assert issubclass(quantir.ConfigError, ValueError) and issubclass(quantir.DataError, ValueError)


def test_statistics_of_another_model(tmp_path, digits):
    st = quantir.calibrate(digits["mlir"], digits["calib"])
    with pytest.raises(quantir.StatsError) as e:
        quantir.quantize(digits["onnx"], tmp_path / "o.onnx", stats=st)
    one_line(e)
    (tmp_path / "s.json").write_text("{not json")
    with pytest.raises(quantir.StatsError) as e:
        quantir.Stats.load(tmp_path / "s.json")
    assert "s.json" in one_line(e)


def test_run_errors(digits):
    with pytest.raises(quantir.ConfigError, match="no array for input"):
        quantir.run(digits["onnx"], {"a": digits["x"][:1], "b": digits["x"][:1]})
    with pytest.raises(quantir.ExecutionError):
        quantir.run(digits["onnx"], {"input": digits["x"][:2, :3]})
    with pytest.raises(quantir.DataError, match="dtype object"):
        quantir.run(digits["onnx"], {"input": np.array([object()])})


def test_progress_callback_exceptions_stop_the_run(digits):
    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantir.calibrate(digits["mlir"], digits["calib"], progress=stop)


def test_ctrl_c_interrupts_a_streaming_calibration(tmp_path, digits):
    script = textwrap.dedent(
        f"""
        import signal, sys, numpy as np, quantir
        # Ctrl-C raises KeyboardInterrupt, as at a terminal, even where this test was started
        # with SIGINT ignored (a background job of a shell without job control)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        x = np.load({str(digits["calib"])!r})["x"]
        def forever():
            i = 0
            while True:
                if i == 400:
                    print("started", flush=True)
                yield {{"x": x[i % len(x)]}}
                i += 1
        try:
            quantir.calibrate({str(digits["mlir"])!r}, forever())
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        sys.exit(3)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "interrupted" in out
