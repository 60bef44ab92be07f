//! Robustness: recovering from dead holders and waiters and expired leases, the lease protocol, and a dead participant's clean-up.

pub mod cleanup;
pub mod leasing;
pub mod recover;
