"""The README's Python example runs as written and prints the figures the CLI gives."""

import json
import re
import subprocess
import sys

from conftest import ROOT


def readme_example():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_prints_the_cli_figures(cli):
    code = readme_example()
    assert code in (ROOT / "examples" / "quickstart.py").read_text(), "examples/quickstart.py is the README's example"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    m = "examples/digits_cnn.mlir"
    want = json.loads(cli("evaluate", ROOT / m, ROOT / "target/digits_cnn.int8.mlir", "--data", ROOT / "examples/digits_test.npz", "--labels", "y", "--json").stdout)
    o = want["outputs"][0]
    line = f"SQNR {o['sqnr_db']:.1f} dB, top-1 agreement {o['top1_agreement']:.3f}, accuracy {o['quantized_accuracy']:.3f}"
    assert out.strip().splitlines()[-1] == line
    assert line == "SQNR 42.9 dB, top-1 agreement 1.000, accuracy 0.990"
    assert "quantized: 2 tf.Conv2D, 2 tf.MatMul" in out
