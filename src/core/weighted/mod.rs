//! The weighted kinds — the reader/writer lock and the semaphore: grants by weight from `head`.

pub mod walk;
