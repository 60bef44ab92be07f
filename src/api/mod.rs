//! The public API: lock handles, guards, options, status.

pub mod guard;
pub mod lock;
pub mod options;
pub mod rlock;
pub(crate) mod shared;
pub mod status;
