//! FNV-1a 64, the stable hash of calibration-cache keys (not for security: it only has to tell
//! data sets and options apart, the same on every machine). Model identities, which read every
//! weight, are XXH3-64 (`ir::identity`).

/// FNV-1a 64 state.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        for &x in b {
            self.0 ^= x as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }
    /// A length-prefixed field, so that ("ab", "c") and ("a", "bc") differ.
    pub fn field(&mut self, s: &str) -> &mut Self {
        self.bytes(&(s.len() as u64).to_le_bytes()).bytes(s.as_bytes())
    }
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}
