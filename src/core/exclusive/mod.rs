//! The exclusive lock: the lock word's fast path and taking a ticket, the walk that grants the
//! next ticket, its recovery, and bounded bypass (barges).

pub mod barge;
pub mod fast;
pub mod recover;
pub mod walk;
