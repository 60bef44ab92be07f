//! The file and mapping layer: creating, validating, re-initialising and mapping lock files.

mod image;
mod mapping;
mod open;
mod readonly;
mod validate;

pub use mapping::Mapping;
pub use open::{CreateOptions, open_lock_file, open_read_only};
pub use readonly::ReadOnlyView;
pub use validate::{Verdict, validate_header};
