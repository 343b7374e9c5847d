"""The README's Python example: quantize the digits CNN from a generator of batches and
evaluate it. Run from the repository's root after `pip install ./python`."""

import os
import numpy as np
import quantir

os.makedirs("target", exist_ok=True)                # where the quantized model goes
x = np.load("examples/digits_calib.npz")["x"]       # stands for your tf.data / DataLoader pipeline
def batches():                                      # any iterable of {input name: array}
    for i in range(0, len(x), 32):
        yield {"input": x[i : i + 32]}              # a batch: the first axis indexes samples

summary = quantir.quantize("examples/digits_cnn.mlir", "target/digits_cnn.int8.mlir", calibration=batches())
print(summary)                                      # what was quantized, what stayed float and why
report = quantir.evaluate("examples/digits_cnn.mlir", "target/digits_cnn.int8.mlir", "examples/digits_test.npz", labels="y")
out = report["outputs"][0]
print(f"SQNR {out['sqnr_db']:.1f} dB, top-1 agreement {out['top1_agreement']:.3f}, accuracy {out['quantized_accuracy']:.3f}")
