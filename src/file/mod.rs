//! The file and mapping layer: creating, validating, re-initialising and mapping lock files.

mod image;
mod mapping;
mod open;
mod validate;

pub use image::initial_image;
pub use mapping::Mapping;
pub use open::{CreateOptions, Opened, open_lock_file, open_read_only};
pub use validate::{Verdict, validate_header};
