//! The file and mapping layer: creating, validating, re-initialising and mapping lock files.

pub(crate) mod image;
pub(crate) mod mapping;
pub(crate) mod open;
mod readonly;
pub(crate) mod validate;

pub use crate::names::file::{NamesMap, check_data as check_names_data, open_names_file};
pub use mapping::Mapping;
pub use open::{CreateOptions, Opened, open_lock_file, open_read_only};
pub use readonly::ReadOnlyView;
pub use validate::{Verdict, validate_header};
