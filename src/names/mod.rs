//! Named locks, across the layers: many locks in one file, found by name. The table's layout
//! and protocol (pure, over the mapping's atomics), the file that holds them, and opening a
//! name for the API.

#[cfg(not(fairlock_loom))]
pub mod file;
pub mod layout;
#[cfg(not(fairlock_loom))]
pub mod open;
pub mod table;

#[cfg(all(test, not(fairlock_loom)))]
mod tests;
