//! Formats at the edges: sample data (`.npz`, folders of `.npy`).

pub mod data;
pub mod images;
pub mod npy_stream;
