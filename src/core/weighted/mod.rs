//! The weighted kinds — the reader/writer lock and the semaphore: the same slots, words and
//! tickets as the exclusive lock, granted by weight from `head` (see `walk.rs`).

pub mod admit;
pub mod news;
pub mod recover;
pub mod walk;
