//! [`AsyncEtcdLock`] and [`AsyncEtcdGuard`]: the lock for tokio programs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::endpoint;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::options::EtcdOptions;
use crate::queue::{self, Bounds, Ctx, Grant, Wait};
use crate::session::Session;
use crate::status::{self, Status};

/// What an [`AsyncEtcdLock`] and its clones share.
struct Inner {
    ctx: Ctx,
    ttl_s: i64,
    /// The current session; replaced (lazily, at the next acquisition) once lost.
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Numbers our queue keys, so that no two acquisitions (nor a retry and a later one)
    /// ever share a key. Relaxed: only uniqueness matters.
    seq: AtomicU64,
    /// `pid=… host=…`, the start of our queue keys' values.
    who: String,
}

/// A fair (FIFO) lock held in etcd, for async code (tokio). Cheap to clone; clones share one
/// lease. See the [crate documentation](crate) for what it promises.
///
/// ```no_run
/// # async fn f() -> fairlock_etcd::Result<()> {
/// let lock = fairlock_etcd::AsyncEtcdLock::connect(&["10.0.0.1:2379"], "jobs").await?;
/// let guard = lock.lock().await?;
/// // … work, passing guard.token() to every store that can check it …
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncEtcdLock {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AsyncEtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEtcdLock")
            .field("name", &self.inner.ctx.keys.name)
            .field("endpoints", &self.inner.ctx.endpoints)
            .finish_non_exhaustive()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "?".into())
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

impl EtcdOptions {
    /// Connects for async use; see [`AsyncEtcdLock::connect`].
    pub async fn connect_async<S: AsRef<str>>(
        &self,
        endpoints: &[S],
        name: &str,
    ) -> Result<AsyncEtcdLock> {
        AsyncEtcdLock::connect_with(self, endpoints, name).await
    }
}

impl AsyncEtcdLock {
    /// Connects with the default options ([`EtcdOptions`]): a 10 s lease.
    pub async fn connect<S: AsRef<str>>(endpoints: &[S], name: &str) -> Result<AsyncEtcdLock> {
        AsyncEtcdLock::connect_with(&EtcdOptions::default(), endpoints, name).await
    }

    /// The options builder.
    pub fn options() -> EtcdOptions {
        EtcdOptions::default()
    }

    pub(crate) async fn connect_with<S: AsRef<str>>(
        opts: &EtcdOptions,
        endpoints: &[S],
        name: &str,
    ) -> Result<AsyncEtcdLock> {
        let ttl_s = opts.validate()?;
        let keys = Keys::new(name)?;
        let (endpoints, tls) = endpoint::normalize_all(endpoints)?;
        opts.validate_tls(tls)?;
        let joined = endpoints
            .iter()
            .map(|e| e.split_once("://").map_or(e.as_str(), |(_, hp)| hp))
            .collect::<Vec<_>>()
            .join(",");
        let unavailable = |op, source| Error::Unavailable {
            endpoints: joined.clone(),
            op,
            source,
        };
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(opts.connect_timeout)
            .with_keep_alive(Duration::from_secs(2), opts.request_timeout)
            .with_require_leader(true);
        if let Some(ca) = &opts.ca_pem {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
            if let Some((cert, key)) = &opts.identity_pem {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            connect = connect.with_tls(tls);
        }
        if let Some((user, password)) = &opts.user {
            connect = connect.with_user(user.as_str(), password.as_str());
        }
        let client = tokio::time::timeout(
            opts.request_timeout,
            Client::connect(endpoints.clone(), Some(connect)),
        )
        .await
        .map_err(|_| {
            unavailable(
                "connecting",
                crate::session::timed_out(opts.request_timeout),
            )
        })?
        .map_err(|e| match crate::error::refusal(&e, tls) {
            Some(why) => Error::Refused {
                endpoints: joined.clone(),
                why,
                source: e,
            },
            None => unavailable("connecting", e),
        })?;
        let inner = Inner {
            ctx: Ctx {
                client,
                keys,
                request_timeout: opts.request_timeout,
                endpoints: joined,
            },
            ttl_s,
            session: tokio::sync::Mutex::new(None),
            seq: AtomicU64::new(0),
            who: format!("pid={} host={}", std::process::id(), hostname()),
        };
        let lock = AsyncEtcdLock {
            inner: Arc::new(inner),
        };
        // The client connects lazily: granting the first lease is what proves a quorum.
        lock.session(None, None).await?;
        Ok(lock)
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.ctx.keys.name
    }

    /// The endpoints, comma-separated `HOST:PORT`.
    pub fn endpoints(&self) -> &str {
        &self.inner.ctx.endpoints
    }

    /// The current session, or a new one if there is none or it was lost. Granting is
    /// retried on transient errors until the caller's `deadline` (then `Timeout`: a
    /// `lock_timeout` waits as long as it was told, a short outage included), else its `limit`
    /// or one request timeout (then `Unavailable`).
    async fn session(
        &self,
        deadline: Option<Instant>,
        limit: Option<Instant>,
    ) -> Result<Arc<Session>> {
        let ctx = &self.inner.ctx;
        let (end, is_deadline) = match (deadline, limit) {
            (Some(d), _) => (Some(d), true),
            (None, Some(l)) => (Some(l), false),
            (None, None) => (Instant::now().checked_add(ctx.request_timeout), false),
        };
        let ran_out = |source| {
            if is_deadline {
                Error::Timeout {
                    name: ctx.keys.name.clone(),
                }
            } else {
                Error::Unavailable {
                    endpoints: ctx.endpoints.clone(),
                    op: "granting a lease",
                    source,
                }
            }
        };
        let left = || end.map(|e| e.saturating_duration_since(Instant::now()));
        // Another acquisition may be granting one right now (its wait is bounded the same way).
        let mut slot = match left() {
            Some(d) => tokio::time::timeout(d, self.inner.session.lock())
                .await
                .map_err(|_| ran_out(crate::session::timed_out(d)))?,
            None => self.inner.session.lock().await,
        };
        if let Some(s) = slot.as_ref().filter(|s| s.lost().is_none()) {
            return Ok(s.clone());
        }
        // Each attempt waits at most a sixth of the TTL (at least 200 ms), as the requests made
        // for a session do: one stuck on a member that hangs is retried, maybe elsewhere. (An
        // attempt given up may still have granted a lease: nobody keeps it alive, it expires.)
        let sixth = Duration::from_millis(
            u64::try_from(self.inner.ttl_s)
                .unwrap_or(1)
                .saturating_mul(1000)
                / 6,
        );
        let cap = ctx
            .request_timeout
            .min(sixth.max(Duration::from_millis(200)));
        let mut backoff = Duration::from_millis(20);
        let session = loop {
            let budget = left().map_or(cap, |d| d.min(cap));
            match Session::grant(&ctx.client, self.inner.ttl_s, budget).await {
                Ok(s) => break s,
                Err(e)
                    if crate::error::is_unavailable(&e) && left().is_none_or(|d| d > backoff) =>
                {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) if crate::error::is_unavailable(&e) => return Err(ran_out(e)),
                Err(e) => {
                    return Err(Error::Etcd {
                        name: ctx.keys.name.clone(),
                        op: "granting a lease",
                        source: e,
                    });
                }
            }
        };
        *slot = Some(session.clone());
        Ok(session)
    }

    async fn acquire(&self, wait: Wait) -> Result<AsyncEtcdGuard<'_>> {
        let grant = self.acquire_grant(wait).await?;
        Ok(AsyncEtcdGuard {
            lock: self,
            grant: Some(grant),
        })
    }

    pub(crate) async fn acquire_grant(&self, wait: Wait) -> Result<Grant> {
        let b: Bounds = wait.bounds(self.inner.ctx.request_timeout);
        let mut renewed = false;
        loop {
            let session = self.session(b.deadline, b.limit).await?;
            let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
            let keys = &self.inner.ctx.keys;
            let (key, receipt) = (
                keys.entry(session.id(), seq),
                keys.receipt(session.id(), seq),
            );
            let value = format!("{} since={}", self.inner.who, unix_ms());
            match queue::acquire(&self.inner.ctx, session, key, receipt, value, b).await {
                Ok(g) => return Ok(g),
                // Our cached lease was gone on the server (revoked, or expired while this
                // process was stopped) before the keep-alive noticed, and nothing was created:
                // a new lease, once, rather than fail a lock() that held nothing.
                Err(f) if f.stale_lease && !renewed => renewed = true,
                Err(f) => return Err(f.error),
            }
        }
    }

    pub(crate) async fn release_grant(&self, grant: &Grant) -> Result<()> {
        queue::release(&self.inner.ctx, grant).await
    }

    /// Starts releasing `grant` in the background.
    pub(crate) fn start_release(&self, grant: &Grant) {
        drop(queue::start_release(&self.inner.ctx, grant));
    }

    pub(crate) fn check_grant(&self, grant: &Grant) -> Result<()> {
        queue::check(&self.inner.ctx, grant)
    }

    pub(crate) async fn confirm_grant(&self, grant: &Grant) -> Result<()> {
        queue::confirm(&self.inner.ctx, grant).await
    }

    /// Waits in line, then holds the lock. Waits as long as it takes while our lease lives;
    /// fails with [`Error::Unavailable`] if the lease could not be kept alive while waiting
    /// (no quorum within the TTL) or [`Error::LockLost`] if etcd ended it.
    ///
    /// Cancel-safe: dropping the future gives our place in line up (in the background).
    pub async fn lock(&self) -> Result<AsyncEtcdGuard<'_>> {
        self.acquire(Wait::Block).await
    }

    /// Holds the lock if nobody holds it or waits for it; otherwise
    /// [`Error::WouldBlock`]. Never jumps the queue. Costs a few round trips (a key is
    /// created and, if it is not first, deleted).
    pub async fn try_lock(&self) -> Result<AsyncEtcdGuard<'_>> {
        self.acquire(Wait::Try).await
    }

    /// As [`lock`](Self::lock), giving up with [`Error::Timeout`] after `timeout`. A zero
    /// timeout makes one try (it takes a free lock, as `try_lock`); one too large to be a
    /// deadline waits as `lock` does.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<AsyncEtcdGuard<'_>> {
        self.acquire(wait_for(timeout)).await
    }

    /// As [`lock_timeout`](Self::lock_timeout), with a deadline (one already past makes one
    /// try).
    pub async fn lock_until(&self, deadline: Instant) -> Result<AsyncEtcdGuard<'_>> {
        self.acquire(Wait::Until(deadline)).await
    }

    /// Who holds the lock and who waits, as etcd has it now.
    pub async fn status(&self) -> Result<Status> {
        status::read(&self.inner.ctx).await
    }

    /// Revokes our lease now (any lock still held through it is released the way a dead
    /// holder's is: the next holder sees `owner_died`; an acquisition waiting meanwhile stops
    /// with [`Error::LockLost`]). Later acquisitions grant a new one.
    pub async fn close(&self) {
        if let Some(s) = self.inner.session.lock().await.take() {
            s.revoke().await;
        }
    }
}

/// Holds an [`AsyncEtcdLock`]; released when dropped (in the background) or by
/// [`unlock`](Self::unlock).
#[must_use = "the lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct AsyncEtcdGuard<'a> {
    lock: &'a AsyncEtcdLock,
    grant: Option<Grant>,
}

impl AsyncEtcdGuard<'_> {
    fn grant(&self) -> &Grant {
        self.grant
            .as_ref()
            .expect("a guard holds its grant until it is consumed")
    }

    /// The fencing token: the create revision of our queue key, strictly larger than every
    /// earlier grant's of this lock (a takeover after a lease expired included). Pass it to
    /// every store the lock protects and have the store refuse writes with a smaller one.
    pub fn token(&self) -> u64 {
        u64::try_from(self.grant().token).unwrap_or(0)
    }

    /// Whether the previous holder's lease expired instead of its releasing the lock (it
    /// crashed, was stopped, or was cut off from etcd for longer than its TTL): what it
    /// protected may be half-done.
    pub fn owner_died(&self) -> bool {
        self.grant().owner_died
    }

    /// The lease TTL etcd granted.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.grant().session.ttl_s()).unwrap_or(0))
    }

    /// [`Error::LockLost`] if our lease is past its deadline here (no keep-alive answered
    /// within the TTL) or etcd said it is gone. Local: asks nobody, costs nothing; once it
    /// has said `LockLost` it always will.
    pub fn check(&self) -> Result<()> {
        self.lock.check_grant(self.grant())
    }

    /// Renews our lease now and confirms with etcd that our key is still there (a round trip
    /// or two). Unlike the file lock's `extend(d)` it takes no duration: an etcd lease is
    /// renewed to its granted TTL, and renewal goes on in the background anyway.
    pub async fn extend(&self) -> Result<()> {
        self.lock.confirm_grant(self.grant()).await
    }

    /// Releases the lock. [`Error::LockLost`] if it was no longer ours to release (our lease
    /// had ended: another client may have held it meanwhile); [`Error::Unavailable`] if etcd
    /// did not confirm the release within two request timeouts (it goes on trying in the
    /// background while our lease lives). Dropping the future does not stop the release.
    pub async fn unlock(mut self) -> Result<()> {
        let r = self.lock.release_grant(self.grant()).await;
        // Only now: a future dropped before this point leaves the grant to `Drop`, which
        // releases it in the background (a release run twice is harmless).
        self.grant = None;
        r
    }
}

impl Drop for AsyncEtcdGuard<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            // In a task of its own on the session's runtime (we may be outside any runtime).
            self.lock.start_release(&grant);
        }
    }
}

/// The wait of `lock_timeout(timeout)`: until now + `timeout`, or no deadline at all if that
/// instant cannot be represented.
pub(crate) fn wait_for(timeout: Duration) -> Wait {
    match Instant::now().checked_add(timeout) {
        Some(d) => Wait::Until(d),
        None => Wait::Block,
    }
}
