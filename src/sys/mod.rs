//! The platform layer: the Linux facilities the lock is built on, each wrapper naming the
//! system call it makes. The layer of `unsafe` system calls; elsewhere `unsafe` is only where
//! memory is shared or borrowed across types (the mapping, `src/file/mapping.rs`; the handle's
//! fork-aware pointer, `src/raw/handle.rs`; owned guards, `src/raw/owned_guard.rs`; the
//! value of a `FairMutex`, `src/api/mutex.rs`; a permit's `Send`, `src/api/kind_guard.rs`),
//! each with its `SAFETY` argument.

pub mod beacon;
pub mod boot_id;
pub mod clock;
#[cfg(feature = "__test-crash-points")]
pub mod crash;
pub mod fs;
pub mod futex;
pub mod ofd;
pub mod platform;
pub mod sigbus;
pub mod thread;

#[cfg(not(target_os = "linux"))]
compile_error!("fairlock needs Linux: futexes, OFD locks and /proc");

#[cfg(target_endian = "big")]
compile_error!("fairlock waits on the low half of 64-bit slot words: little-endian only");
