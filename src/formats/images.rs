//! Folders of images as sample data: one sample per file (PNG, JPEG, BMP), decoded only when
//! its sample runs, so that memory does not grow with the folder's size.
//!
//! Each image is resized to the model's input size (or `--image-size H,W`) with a triangle
//! filter, converted to the model's channel count (1 = luma, 3 = RGB), scaled to [0, 1] and
//! normalised per channel as `(x - mean) / std` (torchvision's convention: a TF MobileNet that
//! wants [-1, 1] takes mean 0.5 and std 0.5), then laid out NHWC or NCHW.

use image::imageops::FilterType;
use ndarray::{ArrayD, IxDyn};
use std::path::{Path, PathBuf};

/// Errors reading a folder of images (the data layer wraps them in its own error).
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: cannot read: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path}: no samples")]
    NoSamples { path: PathBuf },
}

/// Channel order of the model's image input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    #[default]
    Nhwc,
    Nchw,
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "nhwc" => Ok(Layout::Nhwc),
            "nchw" => Ok(Layout::Nchw),
            _ => Err(format!("expected nhwc or nchw, got '{s}'")),
        }
    }
}

/// How images become tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageOptions {
    /// Target (height, width); the model's input size when `None`.
    pub size: Option<(usize, usize)>,
    /// Per-channel mean and standard deviation applied to values in [0, 1] (one value applies
    /// to every channel).
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    pub layout: Layout,
    /// Use only the first N images (in file-name order).
    pub limit: Option<usize>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            size: None,
            mean: vec![0.0],
            std: vec![1.0],
            layout: Layout::Nhwc,
            limit: None,
        }
    }
}

const EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "bmp"];

/// True when `path` names a file quantir decodes as an image.
pub fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// The image files of a folder, in file-name order.
#[derive(Debug, Clone)]
pub struct ImageFolder {
    pub path: PathBuf,
    pub files: Vec<PathBuf>,
    pub options: ImageOptions,
}

/// The geometry one sample is decoded to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageShape {
    pub height: usize,
    pub width: usize,
    pub channels: usize,
}

impl ImageFolder {
    /// Lists the images of `dir`; an error when there is none.
    pub fn open(dir: &Path, options: &ImageOptions) -> Result<ImageFolder, ImageError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| ImageError::Read {
                path: dir.into(),
                reason: e.to_string(),
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_image(p))
            .collect();
        files.sort();
        if let Some(n) = options.limit {
            files.truncate(n);
        }
        if files.is_empty() {
            return Err(ImageError::NoSamples { path: dir.into() });
        }
        for (what, v) in [("mean", &options.mean), ("std", &options.std)] {
            if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
                return Err(ImageError::Read {
                    path: dir.into(),
                    reason: format!("--{what} needs finite values"),
                });
            }
        }
        if options.std.contains(&0.0) {
            return Err(ImageError::Read {
                path: dir.into(),
                reason: "--std must not be 0".into(),
            });
        }
        Ok(ImageFolder {
            path: dir.into(),
            files,
            options: options.clone(),
        })
    }

    /// The per-sample shape (with a batch dim of 1) for an input of `dims` (`None` = dynamic).
    pub fn shape_for(&self, dims: &[Option<usize>]) -> Result<ImageShape, String> {
        if dims.len() != 4 {
            return Err(format!("an image input has rank 4, this one has rank {}", dims.len()));
        }
        let (h, w, c) = match self.options.layout {
            Layout::Nhwc => (dims[1], dims[2], dims[3]),
            Layout::Nchw => (dims[2], dims[3], dims[1]),
        };
        let channels = c.unwrap_or(3);
        if channels != 1 && channels != 3 {
            return Err(format!(
                "{channels} channels in the {:?} layout; images give 1 or 3",
                self.options.layout
            ));
        }
        let (height, width) = match (self.options.size, h, w) {
            (Some((sh, sw)), _, _) => (sh, sw),
            (None, Some(h), Some(w)) => (h, w),
            _ => return Err("the input's height and width are dynamic: give --image-size H,W".into()),
        };
        if h.is_some_and(|h| h != height) || w.is_some_and(|w| w != width) {
            return Err(format!(
                "--image-size {height},{width} does not match the input's {}x{}",
                h.unwrap_or(0),
                w.unwrap_or(0)
            ));
        }
        for (what, v) in [("mean", &self.options.mean), ("std", &self.options.std)] {
            if v.len() != 1 && v.len() != channels {
                return Err(format!("--{what} has {} values for {channels} channels", v.len()));
            }
        }
        Ok(ImageShape {
            height,
            width,
            channels,
        })
    }

    /// Decodes image `i` into a `[1, H, W, C]` or `[1, C, H, W]` f32 tensor.
    pub fn load(&self, i: usize, shape: ImageShape) -> Result<ArrayD<f32>, ImageError> {
        let file = &self.files[i];
        let img = image::ImageReader::open(file)
            .map_err(|e| ImageError::Read {
                path: file.clone(),
                reason: e.to_string(),
            })?
            .with_guessed_format()
            .map_err(|e| ImageError::Read {
                path: file.clone(),
                reason: e.to_string(),
            })?
            .decode()
            .map_err(|e| ImageError::Read {
                path: file.clone(),
                reason: format!("not a readable image: {e}"),
            })?;
        let (h, w, c) = (shape.height, shape.width, shape.channels);
        let img = if img.height() as usize != h || img.width() as usize != w {
            img.resize_exact(w as u32, h as u32, FilterType::Triangle)
        } else {
            img
        };
        let pixels: Vec<u8> = if c == 1 {
            img.to_luma8().into_raw()
        } else {
            img.to_rgb8().into_raw()
        };
        let at = |v: &Vec<f32>, ch: usize| if v.len() == 1 { v[0] } else { v[ch] };
        let norm: Vec<(f32, f32)> = (0..c)
            .map(|ch| (at(&self.options.mean, ch), 1.0 / at(&self.options.std, ch)))
            .collect();
        let value = |p: usize, ch: usize| (pixels[p * c + ch] as f32 / 255.0 - norm[ch].0) * norm[ch].1;
        let (dims, data): (Vec<usize>, Vec<f32>) = match self.options.layout {
            Layout::Nhwc => (vec![1, h, w, c], (0..h * w * c).map(|k| value(k / c, k % c)).collect()),
            Layout::Nchw => (
                vec![1, c, h, w],
                (0..c * h * w).map(|k| value(k % (h * w), k / (h * w))).collect(),
            ),
        };
        ArrayD::from_shape_vec(IxDyn(&dims), data).map_err(|e| ImageError::Read {
            path: file.clone(),
            reason: e.to_string(),
        })
    }
}
