//! The platform layer: the Linux facilities the lock is built on, each wrapper naming the
//! system call it makes. Besides the mapping (`src/file/mapping.rs`) and the handle's
//! fork-aware pointer (`src/api/lock.rs`), this is the only layer that uses `unsafe`.

pub mod beacon;
pub mod boot_id;
pub mod clock;
#[cfg(feature = "__test-crash-points")]
pub mod crash;
pub mod fs;
pub mod futex;
pub mod ofd;
pub mod platform;
pub mod thread;

#[cfg(not(target_os = "linux"))]
compile_error!("fairlock needs Linux: futexes, OFD locks and /proc");

#[cfg(target_endian = "big")]
compile_error!("fairlock waits on the low half of 64-bit slot words: little-endian only");
