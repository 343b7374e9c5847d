"""quantir's Python API against its command line: the same request gives byte-identical files,
from a path, a dict of arrays, a generator or an onnxruntime CalibrationDataReader."""

import json

import numpy as np
import pytest

import quantir


class DigitsReader:
    """A CalibrationDataReader written as onnxruntime's examples write them
    (onnxruntime/quantization/calibrate.py, the ResNet50 example's data reader)."""

    def __init__(self, samples, input_name):
        self.enum_data = None
        self.data_list = [s[None, ...] for s in samples]
        self.input_name = input_name

    def get_next(self):
        if self.enum_data is None:
            self.enum_data = iter([{self.input_name: d} for d in self.data_list])
        return next(self.enum_data, None)

    def rewind(self):
        self.enum_data = None


def one_by_one(x, name):
    for s in x:
        yield {name: s}


def batches(x, name, size):
    for i in range(0, len(x), size):
        yield {name: x[i : i + size]}


def test_quantize_from_every_kind_of_data_matches_the_cli(tmp_path, cli, digits):
    want = tmp_path / "cli.mlir"
    cli("quantize", digits["mlir"], "--data", digits["calib"], "--no-cache", "-o", want)
    x = digits["x"]
    sources = {
        "path": digits["calib"],
        "dict": {"x": x},
        "generator": one_by_one(x, "x"),
        "batches": batches(x, "x", 32),
        "reader": DigitsReader(x, "input"),
    }
    for kind, data in sources.items():
        got = tmp_path / f"{kind}.mlir"
        s = quantir.quantize(digits["mlir"], got, calibration=data, cache=False)
        assert got.read_bytes() == want.read_bytes(), kind
        assert s.quantized_ops == {"tf.Conv2D": 2, "tf.MatMul": 2}
        assert s.left_float == []


def test_onnx_output_from_a_reader_matches_the_cli_and_runs_in_onnxruntime(tmp_path, cli, digits):
    ort = pytest.importorskip("onnxruntime")
    want = tmp_path / "cli.onnx"
    cli("quantize", digits["onnx"], "--data", digits["calib"], "--no-cache", "-o", want)
    got = tmp_path / "py.onnx"
    s = quantir.quantize(digits["onnx"], got, calibration=DigitsReader(digits["x"], "input"), runtime="onnxruntime")
    assert got.read_bytes() == want.read_bytes()
    # uint8 activations: onnxruntime's own U8S8 default, which its x86 selectors fuse with uint8 weights too
    assert s.scheme == "onnx" and s.activations == "uint8"
    x = digits["x"][:1]
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(str(got), so, providers=["CPUExecutionProvider"])
        (ours,) = quantir.run(got, {"input": x}).values()
        (theirs,) = sess.run(None, {"input": x})
        assert np.argmax(ours) == np.argmax(theirs)


def test_savedmodel_to_onnx_matches_the_cli(tmp_path, cli, digits):
    want = tmp_path / "cli.onnx"
    cli("quantize", digits["savedmodel"], "--data", digits["calib"], "--no-cache", "-o", want)
    got = tmp_path / "py.onnx"
    s = quantir.quantize(digits["savedmodel"], got, calibration=one_by_one(digits["x"], "input"))
    assert got.read_bytes() == want.read_bytes()
    assert any("lowered" in m for m in s.messages)


def test_options_are_the_cli_flags(tmp_path, cli, digits):
    want = tmp_path / "cli.onnx"
    cli(
        "quantize", digits["onnx"], "--data", digits["calib"], "--no-cache", "--per-tensor",
        "--method", "percentile", "--percentile", "99.9", "--symmetric-activations", "-o", want,
    )
    got = tmp_path / "py.onnx"
    quantir.quantize(
        digits["onnx"], got, calibration={"x": digits["x"]}, per_channel=False, method="percentile",
        percentile=99.9, symmetric_activations=True,
    )
    assert got.read_bytes() == want.read_bytes()


def test_a_recipe_dict_is_the_recipe_file(tmp_path, digits):
    recipe = tmp_path / "r.toml"
    recipe.write_text('weights = "int8"\nmethod = "mse"\n\n[[override]]\nmatch = "*MatMul*"\nactivations = "int16"\n')
    a, b = tmp_path / "file.mlir", tmp_path / "dict.mlir"
    quantir.quantize(digits["mlir"], a, calibration=digits["calib"], config=recipe, cache=False)
    quantir.quantize(
        digits["mlir"], b, calibration=digits["calib"], cache=False,
        config={"weights": "int8", "method": "mse", "override": [{"match": "*MatMul*", "activations": "int16"}]},
    )
    assert a.read_bytes() == b.read_bytes()


def test_weight_only_needs_no_data(tmp_path, cli, digits):
    want, got = tmp_path / "cli.mlir", tmp_path / "py.mlir"
    cli("quantize", digits["mlir"], "--activations", "none", "-o", want)
    s = quantir.quantize(digits["mlir"], got, activations="none")
    assert got.read_bytes() == want.read_bytes()
    assert s.activations == "float"


def test_calibrate_save_and_shards_match_the_cli(tmp_path, cli, digits):
    want = tmp_path / "cli.json"
    cli("calibrate", digits["mlir"], "--data", digits["calib"], "--method", "entropy", "-o", want)
    for data in (digits["calib"], one_by_one(digits["x"], "x"), batches(digits["x"], "x", 7)):
        st = quantir.calibrate(digits["mlir"], data, method="entropy")
        st.save(tmp_path / "py.json")
        assert (tmp_path / "py.json").read_bytes() == want.read_bytes()
    assert st.num_samples == 200 and len(st) == len(st.tensors) > 0
    assert "200 samples" in repr(st)
    # shards: the CLI's merge of the CLI's shards is the Python merge of Python shards
    for i in range(3):
        cli("calibrate", digits["mlir"], "--data", digits["calib"], "--shard", f"{i}/3", "-o", tmp_path / f"s{i}.json")
    cli("merge", *[tmp_path / f"s{i}.json" for i in range(3)], "-o", tmp_path / "cli_merged.json")
    parts = [quantir.calibrate(digits["mlir"], one_by_one(digits["x"], "x"), shard=(i, 3)) for i in range(3)]
    quantir.merge(parts).save(tmp_path / "py_merged.json")
    assert (tmp_path / "py_merged.json").read_bytes() == (tmp_path / "cli_merged.json").read_bytes()
    # and statistics quantize as the file does
    a, b = tmp_path / "a.mlir", tmp_path / "b.mlir"
    quantir.quantize(digits["mlir"], a, stats=quantir.merge(parts))
    quantir.quantize(digits["mlir"], b, stats=tmp_path / "cli_merged.json")
    assert a.read_bytes() == b.read_bytes()
    assert quantir.Stats.load(want).to_json() == want.read_text()


def test_evaluate_is_evaluate_json(tmp_path, cli, digits):
    q = tmp_path / "q.mlir"
    quantir.quantize(digits["mlir"], q, calibration=digits["calib"])
    args = ("evaluate", digits["mlir"], q, "--data", digits["test"], "--labels", "y", "--per-layer", "--json")
    want = json.loads(cli(*args, "--report", tmp_path / "cli.html").stdout)
    got = quantir.evaluate(digits["mlir"], q, digits["test"], labels="y", per_layer=True, report=tmp_path / "py.html")
    assert got == want
    assert got["outputs"][0]["sqnr_db"] > 40
    assert (tmp_path / "py.html").read_bytes() == (tmp_path / "cli.html").read_bytes()
    t = np.load(digits["test"])
    assert quantir.evaluate(digits["mlir"], q, {"x": t["x"], "y": t["y"]}, labels="y") == json.loads(
        cli("evaluate", digits["mlir"], q, "--data", digits["test"], "--labels", "y", "--json").stdout
    )


def test_run_is_the_cli_run(tmp_path, cli, digits):
    cli("run", digits["mlir"], "--data", digits["test"], "--limit", "3", "-o", tmp_path / "out.npz")
    want = np.load(tmp_path / "out.npz")
    x = np.load(digits["test"])["x"][:3]
    for i in range(3):
        got = quantir.run(digits["mlir"], {"input": x[i : i + 1]})
        (name,) = got
        assert got[name].dtype == np.float32 and got[name].flags.owndata is not None
        np.testing.assert_array_equal(got[name], want[name][i : i + 1])


def test_progress_hook_sees_every_sample(digits):
    seen = []
    quantir.calibrate(digits["mlir"], digits["calib"], progress=lambda done, total: seen.append((done, total)))
    assert seen == [(d, 200) for d in range(1, 201)]
    seen.clear()
    quantir.calibrate(digits["mlir"], one_by_one(digits["x"], "x"), progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (200, None)


def test_summary_reads_well(tmp_path, digits):
    s = quantir.quantize(digits["mlir"], tmp_path / "q.mlir", calibration=digits["calib"])
    assert repr(s).startswith("Summary(output=")
    assert "quantized: 2 tf.Conv2D, 2 tf.MatMul" in str(s)
    assert s.as_dict()["totals"]["int8_mac_share"] == s.int8_mac_share
    assert any(m.startswith("calibrated 5 tensors on 200 samples") or "from cache" in m for m in s.messages)


@pytest.mark.parametrize("form", ["mlir", "onnx", "savedmodel"])
def test_every_function_on_every_model_form_matches_the_cli(tmp_path, cli, digits, form):
    m = digits[form]
    # a SavedModel's ONNX form is calibrated for an .onnx output
    lowered = ["--onnx"] if form == "savedmodel" else []
    cli("calibrate", m, "--data", digits["calib"], *lowered, "-o", tmp_path / "cli.json")
    quantir.calibrate(m, DigitsReader(digits["x"], "input"), onnx=bool(lowered)).save(tmp_path / "py.json")
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    ext = "onnx" if form != "mlir" else "mlir"
    cli("quantize", m, "--stats", tmp_path / "cli.json", "-o", tmp_path / f"cli.{ext}")
    quantir.quantize(m, tmp_path / f"py.{ext}", stats=tmp_path / "py.json")
    assert (tmp_path / f"py.{ext}").read_bytes() == (tmp_path / f"cli.{ext}").read_bytes()
    q = tmp_path / f"py.{ext}"
    want = json.loads(cli("evaluate", m, q, "--data", digits["test"], "--labels", "y", "--json").stdout)
    assert quantir.evaluate(m, q, digits["test"], labels="y") == want
    cli("run", q, "--data", digits["test"], "--limit", "2", "-o", tmp_path / "out.npz")
    ran = np.load(tmp_path / "out.npz")
    x = np.load(digits["test"])["x"]
    for i in range(2):
        got = quantir.run(q, {"input": x[i : i + 1]})
        for name, v in got.items():
            np.testing.assert_array_equal(v, ran[name][i : i + 1])


def test_a_quality_target_matches_the_cli(tmp_path, cli, digits):
    want = tmp_path / "cli.mlir"
    cli("quantize", digits["mlir"], "--data", digits["calib"], "--no-cache", "--target-sqnr", "43.5", "-o", want)
    got = tmp_path / "py.mlir"
    # the same samples as arrays: a target scores on 16 spread over them, as on the file
    s = quantir.quantize(digits["mlir"], got, calibration={"x": digits["x"]}, target_sqnr=43.5)
    assert got.read_bytes() == want.read_bytes()
    assert s.target["sqnr_db"] >= 43.5 and s.target["raised"]
    # a stream, read once and its length unknown, keeps the same 16 as it goes (decimating)
    streamed = tmp_path / "stream.mlir"
    s = quantir.quantize(digits["mlir"], streamed, calibration=one_by_one(digits["x"], "x"), target_sqnr=43.5)
    assert s.target["sqnr_db"] >= 43.5 and s.target["samples"] == 16
    assert streamed.read_bytes() == want.read_bytes()


def test_a_quality_target_on_validation_data_matches_the_cli(tmp_path, cli, digits):
    want = tmp_path / "cli.mlir"
    cli("quantize", digits["mlir"], "--data", digits["calib"], "--no-cache", "--target-sqnr", "43.5",
        "--validation", digits["test"], "-o", want)
    got = tmp_path / "py.mlir"
    s = quantir.quantize(digits["mlir"], got, calibration=digits["calib"], target_sqnr=43.5, validation=digits["test"])
    assert got.read_bytes() == want.read_bytes()
    assert s.target["scored_on"] == "validation" and s.target["sqnr_db"] >= 43.5
    # a top-1 target, against the float model's argmax on every validation sample
    cli("quantize", digits["mlir"], "--data", digits["calib"], "--no-cache", "--weights", "int4",
        "--target-top1", "0.999", "--validation", digits["test"], "-o", want)
    s = quantir.quantize(digits["mlir"], got, calibration=digits["calib"], weights="int4", target_top1=0.999,
                         validation=digits["test"])
    assert got.read_bytes() == want.read_bytes()
    assert s.target["top1"] >= 0.999 > s.target["int8_top1"] and s.target["top1_of"] == "the float model"
    with pytest.raises(quantir.ConfigError, match="validation: expected a path or a dict of arrays"):
        quantir.quantize(digits["mlir"], got, calibration=digits["calib"], target_sqnr=43.5,
                         validation=({"x": x} for x in digits["x"][:2]))


def test_ranges_chosen_per_activation_match_the_cli(tmp_path, cli, digits):
    want = tmp_path / "cli.onnx"
    cli("quantize", digits["onnx"], "--data", digits["calib"], "--no-cache", "--choose-range", "-o", want)
    got = tmp_path / "py.onnx"
    s = quantir.quantize(digits["onnx"], got, calibration={"x": digits["x"]}, choose_range=True)
    assert got.read_bytes() == want.read_bytes()
    assert any(m.startswith("ranges chosen per activation") for m in s.messages), s.messages
    # a stream keeps the 16 samples spread over it that the file scores on
    streamed = tmp_path / "stream.onnx"
    quantir.quantize(digits["onnx"], streamed, calibration=one_by_one(digits["x"], "x"), choose_range=True)
    assert streamed.read_bytes() == want.read_bytes()
    with pytest.raises(ValueError, match="not both"):
        quantir.quantize(digits["onnx"], got, calibration={"x": digits["x"]}, choose_range=True, choose_method=True)
