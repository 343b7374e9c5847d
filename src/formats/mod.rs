//! Formats at the edges: models (`.mlir`/`.mlirbc`, `.onnx`) and sample data (`.npz`,
//! folders of `.npy`, image folders).

pub mod data;
pub mod images;
pub mod model;
pub mod npy_stream;
pub mod onnx;
pub mod savedmodel;
