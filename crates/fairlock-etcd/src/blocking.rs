//! [`EtcdLock`] and [`EtcdGuard`]: the blocking API, in the shape of `fairlock::FairLock`.
//!
//! An `EtcdLock` owns a small tokio runtime (one worker thread) that keeps its lease alive
//! in the background while the caller's thread does its work; every call blocks the calling
//! thread on it. Calling it from inside an async runtime is refused with
//! [`Error::InvalidOption`] (it would block that runtime's thread): use
//! [`AsyncEtcdLock`] there.

use std::time::{Duration, Instant};

use crate::asynchronous::{AsyncEtcdLock, wait_for};
use crate::error::{Error, Result};
use crate::options::EtcdOptions;
use crate::queue::{Grant, Wait};
use crate::status::Status;

/// A fair (FIFO) lock held in etcd, across hosts, with `fairlock::FairLock`'s API.
///
/// ```no_run
/// let lock = fairlock_etcd::EtcdLock::connect(&["10.0.0.1:2379", "10.0.0.2:2379"], "jobs")?;
/// let guard = lock.lock()?;
/// println!("token {} (the last holder died: {})", guard.token(), guard.owner_died());
/// guard.unlock()?;
/// # Ok::<(), fairlock_etcd::Error>(())
/// ```
pub struct EtcdLock {
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    lock: AsyncEtcdLock,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("name", &self.lock.name())
            .field("endpoints", &self.lock.endpoints())
            .finish_non_exhaustive()
    }
}

fn outside_runtime(what: &str) -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::InvalidOption {
            what: format!(
                "EtcdLock::{what} was called inside an async runtime, where it would block the \
                 runtime's thread; use AsyncEtcdLock there"
            ),
        });
    }
    Ok(())
}

impl EtcdOptions {
    /// Connects to the cluster at `endpoints` (`HOST:PORT` or `http://HOST:PORT`) and opens
    /// the lock `name`, for blocking use; see [`EtcdLock::connect`].
    pub fn connect<S: AsRef<str>>(&self, endpoints: &[S], name: &str) -> Result<EtcdLock> {
        EtcdLock::connect_with(self, endpoints, name)
    }
}

impl EtcdLock {
    /// Connects to the cluster at `endpoints` (`HOST:PORT` or `http://HOST:PORT`; any
    /// members of it) and opens the lock `name` (1 to 255 bytes of UTF-8, no `/`, no control
    /// characters), with the default options: a 10 s lease. Fails with
    /// [`Error::Unavailable`] if no quorum answers within the request timeout.
    pub fn connect<S: AsRef<str>>(endpoints: &[S], name: &str) -> Result<EtcdLock> {
        EtcdLock::connect_with(&EtcdOptions::default(), endpoints, name)
    }

    /// The options builder: `EtcdLock::options().lease_ttl(Duration::from_secs(5)).connect(…)`.
    pub fn options() -> EtcdOptions {
        EtcdOptions::default()
    }

    pub(crate) fn connect_with<S: AsRef<str>>(
        opts: &EtcdOptions,
        endpoints: &[S],
        name: &str,
    ) -> Result<EtcdLock> {
        outside_runtime("connect")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fairlock-etcd")
            .enable_all()
            .build()
            .map_err(|e| Error::InvalidOption {
                what: format!("cannot start the client's runtime thread: {e}"),
            })?;
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let lock = runtime.block_on(AsyncEtcdLock::connect_with(opts, &endpoints, name))?;
        Ok(EtcdLock {
            runtime: Some(runtime),
            lock,
        })
    }

    fn block_on<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        outside_runtime(what)?;
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as the lock")
            .block_on(f)
    }

    fn acquire(&self, what: &str, wait: Wait) -> Result<EtcdGuard<'_>> {
        let grant = self.block_on(what, self.lock.acquire_grant(wait))?;
        Ok(EtcdGuard {
            lock: self,
            grant: Some(grant),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The endpoints, comma-separated `HOST:PORT`.
    pub fn endpoints(&self) -> &str {
        self.lock.endpoints()
    }

    /// Waits in line (FIFO by arrival at etcd), then holds the lock. Waits as long as it
    /// takes while our lease lives; [`Error::Unavailable`] if the lease could not be kept
    /// alive while waiting (no quorum within the TTL), [`Error::LockLost`] if etcd ended it.
    pub fn lock(&self) -> Result<EtcdGuard<'_>> {
        self.acquire("lock", Wait::Block)
    }

    /// Holds the lock if nobody holds it or waits for it; otherwise [`Error::WouldBlock`].
    /// Never jumps the queue.
    pub fn try_lock(&self) -> Result<EtcdGuard<'_>> {
        self.acquire("try_lock", Wait::Try)
    }

    /// As [`lock`](Self::lock), giving up with [`Error::Timeout`] after `timeout` (our place
    /// in line is given up). A zero timeout makes one try: it takes a free lock, as
    /// `try_lock` does, and says `Timeout` otherwise; a timeout too large to be a deadline
    /// waits as `lock` does.
    pub fn lock_timeout(&self, timeout: Duration) -> Result<EtcdGuard<'_>> {
        self.acquire("lock_timeout", wait_for(timeout))
    }

    /// As [`lock_timeout`](Self::lock_timeout), with a deadline (one already past makes one
    /// try).
    pub fn lock_until(&self, deadline: Instant) -> Result<EtcdGuard<'_>> {
        self.acquire("lock_until", Wait::Until(deadline))
    }

    /// Who holds the lock and who waits, as etcd has it now.
    pub fn status(&self) -> Result<Status> {
        self.block_on("status", self.lock.status())
    }

    /// Revokes our lease now, from any thread: an acquisition waiting in another thread stops
    /// with [`Error::LockLost`], and our keys go at once instead of blocking the others until
    /// the lease's TTL has passed (a program that must exit while it waits, on a signal, calls
    /// this first). A lock still held through the lease is released the way a dead holder's
    /// is: the next holder sees `owner_died`. Later acquisitions grant a new lease.
    pub fn close(&self) -> Result<()> {
        self.block_on("close", async {
            self.lock.close().await;
            Ok(())
        })
    }
}

impl Drop for EtcdLock {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                rt.block_on(self.lock.close());
            }
            rt.shutdown_background();
        }
    }
}

/// Holds an [`EtcdLock`]; released when dropped or by [`unlock`](Self::unlock).
#[must_use = "the lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct EtcdGuard<'a> {
    lock: &'a EtcdLock,
    grant: Option<Grant>,
}

impl EtcdGuard<'_> {
    fn grant(&self) -> &Grant {
        self.grant
            .as_ref()
            .expect("a guard holds its grant until it is consumed")
    }

    /// The fencing token: the create revision of our queue key in etcd, strictly larger than
    /// every earlier grant's of this lock, takeovers after an expired lease included. Pass it
    /// to every store the lock protects and have the store refuse a smaller one than it has
    /// seen (see `docs/DESIGN.md`).
    pub fn token(&self) -> u64 {
        u64::try_from(self.grant().token).unwrap_or(0)
    }

    /// Whether the previous holder's lease expired instead of its releasing the lock: it
    /// crashed, was stopped, or was cut off from etcd for longer than its TTL. Told only
    /// after that TTL: etcd cannot know a client died sooner.
    pub fn owner_died(&self) -> bool {
        self.grant().owner_died
    }

    /// The lease TTL etcd granted.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.grant().session.ttl_s()).unwrap_or(0))
    }

    /// [`Error::LockLost`] if our lease is past its deadline here (no keep-alive answered
    /// within the TTL) or etcd said it is gone. Local: asks nobody; once it has said
    /// `LockLost` it always will.
    pub fn check(&self) -> Result<()> {
        self.lock.lock.check_grant(self.grant())
    }

    /// Renews our lease now and confirms with etcd that our key is still there. Takes no
    /// duration, unlike `fairlock`'s `extend(d)`: an etcd lease renews to its granted TTL,
    /// and renewal goes on in the background anyway.
    pub fn extend(&self) -> Result<()> {
        self.lock
            .block_on("extend", self.lock.lock.confirm_grant(self.grant()))
    }

    /// Releases the lock. [`Error::LockLost`] if it was no longer ours (our lease had ended:
    /// another client may have held it meanwhile); [`Error::Unavailable`] if etcd did not
    /// confirm the release within two request timeouts (it goes on trying in the background
    /// while our lease lives).
    pub fn unlock(mut self) -> Result<()> {
        let grant = self
            .grant
            .take()
            .expect("a guard holds its grant until it is consumed");
        self.lock
            .block_on("unlock", self.lock.lock.release_grant(&grant))
    }
}

impl Drop for EtcdGuard<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            if outside_runtime("drop").is_ok() {
                let _ = self
                    .lock
                    .block_on("drop", self.lock.lock.release_grant(&grant));
            } else {
                self.lock.lock.start_release(&grant);
            }
        }
    }
}
