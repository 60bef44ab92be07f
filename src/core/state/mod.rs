//! The shared state and the encodings of its words: the file's layout and the `LockState` view, the lock word, the slot word, the lease field.

pub mod layout;
pub mod lease;
pub mod lock_word;
pub mod slot_word;
