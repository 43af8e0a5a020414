#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod engine;
pub mod error;
pub mod foreign;
pub mod identity;
pub mod ipc;
pub mod layout;
pub mod matcher;
pub mod name;
pub mod namespace;
pub mod registry;
pub mod session;
mod sync;
pub mod wellknown;
pub mod wire;

pub use error::{FieldRef, LayoutError, NameError, RegistryError, TagError};
pub use identity::Identity;
pub use layout::{Field, Reach, TagLayout};
pub use matcher::{overlap, Matcher, RawMatcher, Tag};
pub use name::Name;
pub use namespace::{Namespace, Route};
#[cfg(not(loom))]
pub use registry::{global, init_global};
pub use registry::{LeaseToken, Registry};
pub use session::{Directory, Event, Session, SessionError};
