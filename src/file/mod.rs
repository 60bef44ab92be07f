//! The file and mapping layer: creating, validating, re-initialising and mapping lock files.

mod image;
mod mapping;
mod names;
mod open;
mod readonly;
mod validate;

pub use mapping::Mapping;
pub use names::{NamesMap, check_data as check_names_data, open_names_file};
pub use open::{CreateOptions, Opened, open_lock_file, open_read_only};
pub use readonly::ReadOnlyView;
pub use validate::{Verdict, validate_header};
