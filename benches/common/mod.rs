//! Shared by the benches: the bundled MobileNet v2 0.35 module as text.

use std::io::Read;

/// `tests/data/mobilenet_v2_035.mlir.gz`, decompressed.
pub fn mobilenet_text() -> Vec<u8> {
    let gz = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/mobilenet_v2_035.mlir.gz"
    ))
    .unwrap();
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut text).unwrap();
    text
}
