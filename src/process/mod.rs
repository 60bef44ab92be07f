//! Per-process state: one view of each open lock file (its mapping, our participant entry and
//! beacon, which of our threads holds it), and each thread's record of its leased grants.

pub(crate) mod thread_leases;
pub(crate) mod view;
