//! The command line's argument declarations (the binary's own modules).

pub mod args;
