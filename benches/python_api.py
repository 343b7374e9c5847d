"""The Python package's costs, in one run: wheel and extension size, import time, and the
time to calibrate the same samples from an .npz path, a dict of arrays and a generator (one
sample per item), against the release CLI's `calibrate` on the same file. Medians of --repeat.

    .venv/bin/pip install ./python        # the release wheel, as a user gets it
    .venv/bin/python benches/python_api.py [--model M] [--data D] [--repeat 5]
"""

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def median_seconds(f, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "tests/data/mobilenet_v2_035.onnx"))
    ap.add_argument("--data", default=str(ROOT / "tests/data/mobilenet_test.npz"))
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()

    imports = []
    for _ in range(11):
        out = subprocess.run(
            [sys.executable, "-c", "import time; t = time.perf_counter(); import quantir; print(time.perf_counter() - t)"],
            capture_output=True, text=True, check=True,
        ).stdout
        imports.append(float(out))
    import numpy as np
    import quantir

    so = next(pathlib.Path(quantir.__file__).parent.glob("_quantir*.so"))
    print(f"extension: {so.stat().st_size / 1e6:.1f} MB; import quantir: median {statistics.median(imports) * 1e3:.1f} ms of 11")

    x = dict(np.load(a.data))
    (name,) = x
    n = len(x[name])

    def gen():
        for s in x[name]:
            yield {name: s}

    cli = ROOT / "target/release/quantir"
    if not cli.exists():
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "quantir"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "s.json"
        runs = {
            "CLI calibrate (path)": lambda: subprocess.run([str(cli), "calibrate", a.model, "--data", a.data, "-o", str(out)], check=True, capture_output=True),
            "quantir.calibrate(path)": lambda: quantir.calibrate(a.model, a.data),
            "quantir.calibrate(dict)": lambda: quantir.calibrate(a.model, x),
            "quantir.calibrate(generator)": lambda: quantir.calibrate(a.model, gen()),
        }
        base = None
        print(f"{pathlib.Path(a.model).name}, {n} samples, minmax, median of {a.repeat}:")
        for what, f in runs.items():
            s = median_seconds(f, a.repeat)
            base = base or s
            print(f"  {what:30s} {s:7.3f} s  ({s / base:.2f}× the CLI)")


if __name__ == "__main__":
    main()
