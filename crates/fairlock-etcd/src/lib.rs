//! fairlock's lock on etcd: the same API and guarantees as `fairlock::FairLock`, across
//! hosts.
//!
//! ```no_run
//! use fairlock_etcd::EtcdLock;
//!
//! let lock = EtcdLock::connect(&["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"], "jobs")?;
//! let guard = lock.lock()?;                 // FIFO across every client of the cluster
//! if guard.owner_died() { /* the last holder's lease expired: repair */ }
//! store_write(guard.token(), b"...");       // the store refuses tokens older than it has seen
//! guard.unlock()?;                          // LockLost if our lease had ended
//! # fn store_write(_: u64, _: &[u8]) {}
//! # Ok::<(), fairlock_etcd::Error>(())
//! ```
//!
//! # How it works
//!
//! Each client holds an etcd **lease** (TTL 10 s by default), renewed in the background
//! every third of its TTL. To lock `NAME` it creates a key `fairlock/NAME/q/LEASE-SEQ`
//! attached to the lease; the key's **create revision** is its place in line. It watches
//! only the key just before its own (no thundering herd) and holds the lock once no earlier
//! key is left; it then writes the grant record `fairlock/NAME/held`. Unlocking deletes the
//! key and writes `released` in one transaction (and a receipt that lets a retried unlock
//! prove it went through); a client that dies never does, its key vanishes with its lease, and
//! the next holder is told [`owner_died`](EtcdGuard::owner_died).
//!
//! # What it promises
//!
//! - **FIFO**: grants in the order the keys were created (etcd's revision order). A
//!   [`try_lock`](EtcdLock::try_lock) never jumps the queue.
//! - **Fencing**: [`token`](EtcdGuard::token) is the key's create revision, strictly larger
//!   for every later grant, a takeover after an expired lease included.
//! - **A lost lock is reported**: once our lease may have expired (no keep-alive answered
//!   within the TTL less a small margin, by `CLOCK_BOOTTIME`, so a suspended machine counts),
//!   every call on the guard says [`Error::LockLost`] and none pretends otherwise.
//! - **No step acts on a key that is not ours**: every step that acts for our key is a
//!   transaction comparing its create revision (a waiter whose lease died cannot acquire; a
//!   retried unlock cannot delete a newer holder's key); a withdraw deletes only the key named
//!   for its own acquisition.
//! - **Nothing is left behind**: a timed-out, failed or cancelled acquisition (its future
//!   dropped at any point) and a dropped `unlock()` future withdraw or release in the
//!   background, for as long as the lease lives; a join applied after its acquisition gave up
//!   creates nothing.
//!
//! And what it does not: a dead holder is noticed only when its lease's TTL has passed (the
//! local lock notices at once, from the kernel); mutual exclusion in *time* depends on the
//! lease, so work under the lock must carry the token to the store it changes.
//! `docs/DESIGN.md` has the whole argument.

mod asynchronous;
mod blocking;
mod clock;
mod endpoint;
mod error;
mod keys;
mod options;
mod queue;
mod session;
mod status;

pub use asynchronous::{AsyncEtcdGuard, AsyncEtcdLock};
pub use blocking::{EtcdGuard, EtcdLock};
pub use endpoint::{Address, SCHEME, TLS_SCHEME};
pub use error::{Error, Result};
pub use keys::MAX_NAME;
pub use options::EtcdOptions;
pub use status::{Entry, Status};
