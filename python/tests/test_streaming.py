"""A calibration stream is read once, in order, in bounded memory: peak memory does not grow
with the number of samples a generator yields."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest


def conv_model(path):
    """A 1-channel 3x3 convolution and a ReLU on 1x1x256x256 images (256 KiB a sample)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.linspace(-1, 1, 9, dtype=np.float32).reshape(1, 1, 3, 3), "w")
    b = numpy_helper.from_array(np.array([0.1], dtype=np.float32), "b")
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 256, 256])],
        [w, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def peak_rss_mib(model, samples, tmp_path):
    script = textwrap.dedent(
        f"""
        import resource, numpy as np, quantir
        rng = np.random.default_rng(0)
        def gen():
            for _ in range({samples}):
                yield {{"x": rng.standard_normal((1, 1, 256, 256), dtype=np.float32)}}
        st = quantir.calibrate({str(model)!r}, gen(), method="percentile")
        assert st.num_samples == {samples}, st
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def test_memory_is_flat_in_the_number_of_samples(tmp_path):
    model = tmp_path / "conv.onnx"
    conv_model(model)
    small = peak_rss_mib(model, 200, tmp_path)
    large = peak_rss_mib(model, 2000, tmp_path)
    # 1,800 more samples are 450 MiB of input: held, they would show
    assert large - small < 40, (small, large)
