#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod cuda;
pub mod fabric;
pub mod matching;
pub mod node;
