//! The per-segment payload index: [`PayloadIndexBuilder`] writes it at seal
//! time, [`PayloadIndexView`] reads it in place (from an mmap) and turns a
//! [`Filter`](crate::Filter) into the bitmap of matching rows.
//!
//! Layout (all integers little-endian, every section 8-byte aligned relative
//! to the start of the bytes; see the crate README):
//!
//! ```text
//! header (64 bytes)
//!   0  magic "EDDYPIDX"        8  version u32      12 header_len u32 (64)
//!   16 rows u32                20 field_count u32  24 total_len u64
//!   32 entry_len u32 (176)     36 reserved         60 crc32 u32
//! field table: field_count entries of 22 u64 words, sorted by field name
//!   name_off, name_len, type, n, has_count, null_count,
//!   then 8 sections as (offset, length): HAS, NULL, MULTI, A, B, C, D, E
//! data: names and sections
//! ```
//!
//! The CRC32 covers header bytes `0..60` and everything from byte 64 to
//! `total_len`.

mod builder;
mod dict;
mod estimate;
mod evaluate;
mod format;
mod view;

#[cfg(test)]
mod tests;

pub use builder::PayloadIndexBuilder;
pub use estimate::Estimate;
pub use format::{FORMAT_VERSION, HEADER_LEN, MAGIC, OLDEST_SUPPORTED_VERSION};
pub use view::PayloadIndexView;
