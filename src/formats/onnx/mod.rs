//! ONNX at the edges: [`import`] a `ModelProto` into an MLIR module of `onnx.*` ops, and
//! [`export`] a module (float or quantized) back to ONNX, with `quant.qcast`/`quant.dcast` as
//! QuantizeLinear/DequantizeLinear. Everything in between is the shared pipeline.

pub mod export;
pub mod import;
pub mod opsets;
pub mod props;
pub mod proto;

pub use export::{export, save};
pub use import::{import, load};

/// True when `bytes` look like a serialized ONNX model: field 1 (`ir_version`) as a varint
/// first, which every exporter writes first and which neither MLIR text nor bytecode (`ML\xEFR`)
/// can start with. Whether the rest decodes is the import's to say, with its own error.
pub fn looks_like_onnx(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0x08)
}
