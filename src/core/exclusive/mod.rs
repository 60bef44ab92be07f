//! The exclusive lock: the lock word's fast path and taking a ticket, the walk that grants the next ticket, and bounded bypass (barges).

pub mod advance;
pub mod barge;
pub mod fast;
