//! The write-ahead log: framing, writer and reader.

pub mod frame;
