//! The shared state and the encodings of its words: the file's layout, the lock's kind, fencing
//! tokens, the [`LockState`] view, the lock word, the slot word and the lease field.

pub mod format;
pub mod geometry;
pub mod kind;
pub mod lease;
pub mod lock_state;
pub mod lock_word;
pub mod owned;
pub mod slot_word;
pub mod tokens;

pub use format::*;
pub use geometry::*;
pub use kind::*;
pub use lock_state::LockState;
pub use owned::OwnedState;
pub use tokens::*;
