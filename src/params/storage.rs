//! Integer storage types of quantized tensors.

use super::ParamsError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    Int4,
    Uint4,
    Int8,
    Uint8,
    Int16,
    Uint16,
    Int32,
}

impl StorageType {
    pub const ALL: [StorageType; 7] = [
        StorageType::Int4,
        StorageType::Uint4,
        StorageType::Int8,
        StorageType::Uint8,
        StorageType::Int16,
        StorageType::Uint16,
        StorageType::Int32,
    ];

    pub fn bits(self) -> u32 {
        match self {
            StorageType::Int4 | StorageType::Uint4 => 4,
            StorageType::Int8 | StorageType::Uint8 => 8,
            StorageType::Int16 | StorageType::Uint16 => 16,
            StorageType::Int32 => 32,
        }
    }

    pub fn is_signed(self) -> bool {
        matches!(
            self,
            StorageType::Int4 | StorageType::Int8 | StorageType::Int16 | StorageType::Int32
        )
    }

    /// [min, max] of the type.
    pub fn full_range(self) -> (i64, i64) {
        let b = self.bits();
        if self.is_signed() {
            (-(1i64 << (b - 1)), (1i64 << (b - 1)) - 1)
        } else {
            (0, (1i64 << b) - 1)
        }
    }

    /// The storage spelling inside `!quant.uniform<...>`.
    pub fn mlir_storage(self) -> &'static str {
        match self {
            StorageType::Int4 => "i4",
            StorageType::Uint4 => "u4",
            StorageType::Int8 => "i8",
            StorageType::Uint8 => "u8",
            StorageType::Int16 => "i16",
            StorageType::Uint16 => "u16",
            StorageType::Int32 => "i32",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StorageType::Int4 => "int4",
            StorageType::Uint4 => "uint4",
            StorageType::Int8 => "int8",
            StorageType::Uint8 => "uint8",
            StorageType::Int16 => "int16",
            StorageType::Uint16 => "uint16",
            StorageType::Int32 => "int32",
        }
    }
}

impl std::fmt::Display for StorageType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for StorageType {
    type Err = ParamsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StorageType::ALL
            .into_iter()
            .find(|t| t.name() == s || t.mlir_storage() == s)
            .ok_or_else(|| ParamsError::Unknown {
                what: "dtype",
                value: s.into(),
                expected: "int4, uint4, int8, uint8, int16, uint16, int32",
            })
    }
}
