//! A session: one etcd lease, kept alive in the background, and the local knowledge of
//! whether it still lives.
//!
//! The lease's deadline is kept on `CLOCK_BOOTTIME` (which goes on counting while the machine
//! is suspended, as the server's clock does): it is the time a keep-alive that etcd answered
//! was *sent*, plus the TTL the lease was granted with. etcd starts the new TTL when it
//! receives the request, later than we sent it, so the local deadline is never after the
//! server's. Past it the session is lost for good — no later answer revives it — so a guard
//! that once said `LockLost` never says otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock;
use crate::error::is_unavailable;

/// Why a session ended.
#[derive(Debug, Clone)]
pub(crate) struct Lost {
    /// What we know.
    pub why: String,
    /// Whether it ended because etcd could not be reached in time (rather than because etcd
    /// said the lease is gone, or we gave it up).
    pub unreachable: bool,
}

/// What the keep-alive task and the lock's callers share.
#[derive(Debug)]
struct Shared {
    /// The TTL etcd granted, in seconds.
    ttl_s: i64,
    /// Boot-time nanoseconds after which the lease may be gone on the server. Only ever
    /// raised (`fetch_max`): a late answer never moves it back. Relaxed: a number read on its
    /// own; the verdict is `lost`, whose channel orders itself.
    deadline: AtomicU64,
    /// `Some` once lost; set once (the first reason wins).
    lost: watch::Sender<Option<Lost>>,
}

impl Shared {
    fn mark_lost(&self, lost: Lost) {
        self.lost.send_if_modified(|l| {
            if l.is_none() {
                *l = Some(lost);
                true
            } else {
                false
            }
        });
    }

    fn lost(&self) -> Option<Lost> {
        if let Some(l) = self.lost.borrow().clone() {
            return Some(l);
        }
        if clock::boottime_ns() >= self.deadline.load(Ordering::Relaxed) {
            self.mark_lost(Lost {
                why: format!(
                    "no keep-alive of our lease was answered within its TTL of {} s",
                    self.ttl_s
                ),
                unreachable: true,
            });
            return self.lost.borrow().clone();
        }
        None
    }

    fn renewed(&self, sent_ns: u64) {
        let ttl_ns = u64::try_from(self.ttl_s)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000);
        self.deadline
            .fetch_max(sent_ns.saturating_add(ttl_ns), Ordering::Relaxed);
    }

    /// Time left before the deadline.
    fn remaining(&self) -> Duration {
        Duration::from_nanos(
            self.deadline
                .load(Ordering::Relaxed)
                .saturating_sub(clock::boottime_ns()),
        )
    }
}

/// The outcome of one keep-alive round trip.
enum Renewal {
    Renewed,
    /// etcd answered that the lease does not exist (expired or revoked).
    Gone(String),
    /// No answer, or a transient error: try again while the deadline allows.
    Failed(String),
}

/// How long one keep-alive attempt may wait for its answer: the request timeout, but never
/// more than a sixth of the TTL (and not less than 200 ms), so that an attempt stuck on a
/// member that hangs, or behind a leader election, is abandoned and retried (the balancer
/// sends it elsewhere) several times while the lease still lives. A healthy cluster answers
/// a keep-alive in milliseconds.
fn attempt_limit(shared: &Shared, timeout: Duration) -> Duration {
    let sixth = Duration::from_millis(u64::try_from(shared.ttl_s).unwrap_or(1) * 1000 / 6);
    timeout
        .min(sixth.max(Duration::from_millis(200)))
        .min(shared.remaining())
}

async fn renew_once(client: &Client, id: i64, shared: &Shared, timeout: Duration) -> Renewal {
    let timeout = attempt_limit(shared, timeout);
    let sent = clock::boottime_ns();
    let mut lease = client.lease_client();
    match tokio::time::timeout(timeout, lease.keep_alive(id)).await {
        Err(_) => Renewal::Failed(format!("no answer within {timeout:?}")),
        // keep_alive() fails when etcd answers TTL 0: the lease lives, renewed to its TTL.
        Ok(Ok(_)) => {
            shared.renewed(sent);
            Renewal::Renewed
        }
        Ok(Err(e)) if !is_unavailable(&e) => Renewal::Gone(e.to_string()),
        Ok(Err(e)) => Renewal::Failed(e.to_string()),
    }
}

/// The background task: renews every third of the TTL, more often after a failure, until
/// the deadline passes or etcd says the lease is gone.
async fn keep_alive(client: Client, id: i64, shared: Arc<Shared>, timeout: Duration) {
    let period = Duration::from_millis(u64::try_from(shared.ttl_s).unwrap_or(1) * 1000 / 3);
    let retry = (period / 4).max(Duration::from_millis(50));
    let mut wait = period;
    let mut last = String::new();
    loop {
        tokio::time::sleep(wait.min(shared.remaining())).await;
        if shared.lost().is_some() {
            if !last.is_empty() {
                // Say why, if the first reason recorded was only "no answer in time".
                shared.mark_lost(Lost {
                    why: last,
                    unreachable: true,
                });
            }
            return;
        }
        match renew_once(&client, id, &shared, timeout.min(shared.remaining())).await {
            Renewal::Renewed => {
                last.clear();
                wait = period;
            }
            Renewal::Gone(e) => {
                shared.mark_lost(Lost {
                    why: format!("etcd says our lease is gone ({e})"),
                    unreachable: false,
                });
                return;
            }
            Renewal::Failed(e) => {
                last = format!("could not renew our lease within its TTL: {e}");
                wait = retry;
            }
        }
    }
}

/// One lease and its keep-alive task. Dropping it stops the task and revokes the lease
/// (in the background, best effort), which deletes every key attached to it.
pub(crate) struct Session {
    id: i64,
    shared: Arc<Shared>,
    client: Client,
    request_timeout: Duration,
    task: JoinHandle<()>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("ttl_s", &self.shared.ttl_s)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Grants a lease of `ttl_s` seconds and starts keeping it alive on the current runtime.
    /// One attempt, bounded by `request_timeout`; the caller retries.
    pub async fn grant(
        client: &Client,
        ttl_s: i64,
        request_timeout: Duration,
    ) -> Result<Arc<Session>, etcd_client::Error> {
        let sent = clock::boottime_ns();
        let mut lease = client.lease_client();
        let resp = tokio::time::timeout(request_timeout, lease.grant(ttl_s, None))
            .await
            .map_err(|_| timed_out(request_timeout))??;
        if !resp.error().is_empty() {
            return Err(etcd_client::Error::LeaseKeepAliveError(
                resp.error().to_owned(),
            ));
        }
        let shared = Arc::new(Shared {
            ttl_s: resp.ttl(),
            deadline: AtomicU64::new(0),
            lost: watch::Sender::new(None),
        });
        shared.renewed(sent);
        let task = tokio::spawn(keep_alive(
            client.clone(),
            resp.id(),
            shared.clone(),
            request_timeout,
        ));
        Ok(Arc::new(Session {
            id: resp.id(),
            shared,
            client: client.clone(),
            request_timeout,
            task,
            runtime: tokio::runtime::Handle::current(),
        }))
    }

    /// The lease's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL etcd granted, in seconds.
    pub fn ttl_s(&self) -> i64 {
        self.shared.ttl_s
    }

    /// Why the session ended, if it has.
    pub fn lost(&self) -> Option<Lost> {
        self.shared.lost()
    }

    /// Ends the session here and now (for instance: we could not withdraw a queue key, so
    /// the lease must expire to take it away). The keep-alive task stops.
    pub fn abandon(&self, why: String) {
        self.shared.mark_lost(Lost {
            why,
            unreachable: false,
        });
        self.task.abort();
    }

    /// Records that etcd refused a request because our lease does not exist.
    pub fn gone(&self, e: &etcd_client::Error) {
        self.shared.mark_lost(Lost {
            why: format!("etcd says our lease is gone ({e})"),
            unreachable: false,
        });
        self.task.abort();
    }

    /// Waits until the session is lost, and says why.
    pub async fn until_lost(&self) -> Lost {
        let mut rx = self.shared.lost.subscribe();
        loop {
            if let Some(l) = self.lost() {
                return l;
            }
            let left = self.shared.remaining();
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }

    /// One keep-alive round trip now, retried on transient errors while the deadline allows.
    pub async fn renew_now(&self) -> Result<(), Lost> {
        loop {
            if let Some(l) = self.lost() {
                return Err(l);
            }
            let left = self.shared.remaining();
            match renew_once(
                &self.client,
                self.id,
                &self.shared,
                self.request_timeout.min(left),
            )
            .await
            {
                Renewal::Renewed => return self.lost().map_or(Ok(()), Err),
                Renewal::Gone(e) => {
                    self.shared.mark_lost(Lost {
                        why: format!("etcd says our lease is gone ({e})"),
                        unreachable: false,
                    });
                }
                Renewal::Failed(_) => {
                    tokio::time::sleep(Duration::from_millis(50).min(self.shared.remaining()))
                        .await;
                }
            }
        }
    }

    /// Runs `f` on the runtime that drives this session (for work started outside it).
    pub fn spawn_on_runtime(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(f);
    }

    /// Revokes the lease now (deleting its keys) and stops the task. Best effort, bounded by
    /// the request timeout.
    pub async fn revoke(&self) {
        self.abandon("the lock was closed".into());
        let mut lease = self.client.lease_client();
        let _ = tokio::time::timeout(self.request_timeout, lease.revoke(self.id)).await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        if self.shared.lost.borrow().is_some() && self.shared.remaining().is_zero() {
            return;
        }
        let mut lease = self.client.lease_client();
        let (id, timeout) = (self.id, self.request_timeout);
        // The runtime may be shutting down; then the lease simply expires.
        self.runtime.spawn(async move {
            let _ = tokio::time::timeout(timeout, lease.revoke(id)).await;
        });
    }
}

/// The error for a request that got no answer in time.
pub(crate) fn timed_out(d: Duration) -> etcd_client::Error {
    etcd_client::Error::IoError(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {d:?}"),
    ))
}
