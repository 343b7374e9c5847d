"""Shared fixtures: the repository's bundled models and the quantir command line the Python
results are compared with, byte for byte."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DATA = ROOT / "tests" / "data"


def _cli():
    exe = os.environ.get("QUANTIR_BIN")
    if exe:
        return pathlib.Path(exe)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "debug" / "quantir"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--quiet", "--bin", "quantir"], cwd=ROOT, check=True)
    return exe


@pytest.fixture(scope="session")
def cli():
    """Runs the quantir command line; returns the completed process (raises on failure)."""
    exe = _cli()

    def run(*args, check=True):
        p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"quantir {' '.join(map(str, args))} failed: {p.stderr}")
        return p

    return run


@pytest.fixture(scope="session")
def digits():
    """The digits CNN (TF dialect), its calibration and test samples."""
    calib = EXAMPLES / "digits_calib.npz"
    return {
        "mlir": EXAMPLES / "digits_cnn.mlir",
        "onnx": DATA / "digits_cnn.onnx",
        "savedmodel": DATA / "digits_cnn_savedmodel",
        "calib": calib,
        "test": EXAMPLES / "digits_test.npz",
        "x": np.load(calib)["x"],
    }
