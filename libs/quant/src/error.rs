//! Errors of training, encoding and query preparation.

/// Everything that can go wrong when training or using a quantizer.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    /// Dimension zero.
    #[error("vector dimension must be positive")]
    ZeroDim,
    /// A flat matrix whose length is not a multiple of the dimension.
    #[error("data length {len} is not a multiple of dimension {dim}")]
    Ragged {
        /// Number of f32 values given.
        len: usize,
        /// Expected dimension.
        dim: usize,
    },
    /// Not enough training vectors.
    #[error("need at least {need} training vectors, got {got}")]
    TooFewVectors {
        /// Minimum required.
        need: usize,
        /// Number given.
        got: usize,
    },
    /// A vector of the wrong dimension.
    #[error("vector has dimension {got}, the quantizer expects {expected}")]
    DimMismatch {
        /// The quantizer's dimension.
        expected: usize,
        /// The vector's length.
        got: usize,
    },
    /// NaN or infinity in the input.
    #[error("input contains NaN or infinite values")]
    NonFinite,
    /// A parameter outside its valid range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParam {
        /// Parameter name.
        name: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
