//! A session: one etcd lease, kept alive in the background, and the local knowledge of
//! whether it still lives.
//!
//! The lease's deadline is kept on `CLOCK_BOOTTIME` (which goes on counting while the machine
//! is suspended, as the server's clock does): it is the time a keep-alive that etcd answered
//! was *sent*, plus the TTL the lease was granted with, minus a margin for clocks that run at
//! slightly different rates ([`margin`]). etcd starts the new TTL when it receives the
//! request, later than we sent it, so the local deadline comes before the server's by at least
//! the margin, as long as our clock runs no more than 0.5 % slower than the leader's. Past it
//! the session is lost for good — no later answer revives it — so a guard that once said
//! `LockLost` never says otherwise.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    pub cause: Cause,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// No keep-alive was answered before the local deadline (etcd unreachable, or this
    /// process stopped or suspended).
    Unreachable,
    /// etcd said the lease does not exist (expired on the server, or revoked).
    Gone,
    /// We gave it up (the lock was closed, or etcd refused to let us delete a key of ours).
    GivenUp,
}

/// The part of the TTL the local deadline keeps in hand for clock-rate differences between
/// us and the leader: 0.5 % of the TTL (drift between unsynchronised quartz clocks is a few
/// hundred ppm at most), and at least 20 ms (scheduling noise on short TTLs).
pub(crate) fn margin(ttl_ns: u64) -> u64 {
    (ttl_ns / 200).max(20_000_000)
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
    /// Why the last keep-alive attempt failed, if the last one did: said when the deadline
    /// passes (the first reason then), so that `LockLost` tells why renewals failed.
    last_failure: Mutex<Option<String>>,
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
            let last = match self.last_failure.lock().unwrap().as_deref() {
                Some(e) => format!(" (last attempt: {e})"),
                None => String::new(),
            };
            self.mark_lost(Lost {
                why: format!(
                    "no keep-alive of our lease was answered within its TTL of {} s{last}",
                    self.ttl_s
                ),
                cause: Cause::Unreachable,
            });
            return self.lost.borrow().clone();
        }
        None
    }

    fn renewed(&self, sent_ns: u64) {
        let ttl_ns = u64::try_from(self.ttl_s)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000);
        *self.last_failure.lock().unwrap() = None;
        self.deadline.fetch_max(
            sent_ns.saturating_add(ttl_ns.saturating_sub(margin(ttl_ns))),
            Ordering::Relaxed,
        );
    }

    fn failed(&self, why: String) {
        *self.last_failure.lock().unwrap() = Some(why);
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
    /// No answer, or a transient error (noted in `Shared::last_failure`): try again while
    /// the deadline allows.
    Failed,
}

/// How long one attempt of a request made for a session may wait for its answer: the
/// request timeout, but never more than a sixth of the TTL (and not less than 200 ms), nor
/// past the lease's local deadline, so that an attempt stuck on a member that hangs, or behind
/// a leader election, is abandoned and retried (the balancer may send it elsewhere) while the
/// lease still lives. A healthy cluster answers in milliseconds.
fn attempt_limit(shared: &Shared, timeout: Duration) -> Duration {
    attempt_cap(shared, timeout).min(shared.remaining())
}

/// [`attempt_limit`] without the lease's remaining time.
fn attempt_cap(shared: &Shared, timeout: Duration) -> Duration {
    timeout.min(ttl_part(shared, 6).max(Duration::from_millis(200)))
}

/// A `n`th of the TTL.
fn ttl_part(shared: &Shared, n: u64) -> Duration {
    Duration::from_millis(
        u64::try_from(shared.ttl_s)
            .unwrap_or(1)
            .saturating_mul(1000)
            / n,
    )
}

/// One renewal, within `timeout` (and the lease's remaining time): a keep-alive is sent, and
/// another every twelfth of the TTL (at least 100 ms apart) while none has been answered —
/// the earlier ones still pending. The balancer picks a member for each request at random,
/// and a member that hangs (SIGSTOP, a stuck disk) keeps its connection open and looks ready
/// until HTTP/2 keep-alive gives it up seconds later: attempts made one after the other each
/// had a fair chance of going to it again, and three in a row did often enough to cost a
/// holder on a 3 s lease its lock while two members of three served. Overlapping attempts
/// leave no such gap: the first one a healthy member answers renews the lease, from the time
/// it was sent.
async fn renew_once(client: &Client, id: i64, shared: &Shared, timeout: Duration) -> Renewal {
    let budget = timeout.min(shared.remaining());
    let end = tokio::time::Instant::now() + budget;
    let hedge = budget.min(ttl_part(shared, 12).max(Duration::from_millis(100)));
    let mut attempts = tokio::task::JoinSet::new();
    let mut last: Option<String> = None;
    loop {
        let c = client.clone();
        attempts.spawn(async move {
            let sent = clock::boottime_ns();
            (sent, c.lease_client().keep_alive(id).await.map(drop))
        });
        let next = (tokio::time::Instant::now() + hedge).min(end);
        loop {
            tokio::select! {
                Some(done) = attempts.join_next() => match done {
                    // keep_alive() fails when etcd answers TTL 0: the lease lives, renewed
                    // to its TTL.
                    Ok((sent, Ok(()))) => {
                        shared.renewed(sent);
                        return Renewal::Renewed;
                    }
                    Ok((_, Err(e))) if !is_unavailable(&e) => return Renewal::Gone(e.to_string()),
                    // A quick failure (no leader, a refused connection): the next attempt
                    // waits for its turn all the same.
                    Ok((_, Err(e))) => last = Some(e.to_string()),
                    Err(_) => {}
                },
                () = tokio::time::sleep_until(next) => break,
            }
        }
        if tokio::time::Instant::now() >= end {
            // The attempts still pending are dropped (aborted) with the set.
            shared.failed(last.unwrap_or_else(|| format!("no answer within {budget:?}")));
            return Renewal::Failed;
        }
    }
}

/// The background task: renews every third of the TTL, more often after a failure, until
/// the deadline passes or etcd says the lease is gone.
async fn keep_alive(client: Client, id: i64, shared: Arc<Shared>, timeout: Duration) {
    let period = ttl_part(&shared, 3);
    let retry = (period / 4).max(Duration::from_millis(50));
    let mut wait = period;
    loop {
        tokio::time::sleep(wait.min(shared.remaining())).await;
        // Lost by the deadline: `lost()` says why, with the last failure `renew_once` noted.
        if shared.lost().is_some() {
            return;
        }
        match renew_once(&client, id, &shared, timeout.min(shared.remaining())).await {
            Renewal::Renewed => wait = period,
            Renewal::Gone(e) => {
                shared.mark_lost(Lost {
                    why: format!("etcd says our lease is gone ({e})"),
                    cause: Cause::Gone,
                });
                return;
            }
            Renewal::Failed => wait = retry,
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
    /// Receipts (see `keys`) that nothing can need any more, to delete with the next join
    /// (no request of their own; the lease takes whatever is left).
    stale: Mutex<Vec<Vec<u8>>>,
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
            last_failure: Mutex::new(None),
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
            stale: Mutex::new(Vec::new()),
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

    /// How long one attempt of a request made for this session may wait for its answer:
    /// as a keep-alive attempt (see [`attempt_limit`]), so that a request stuck on a member
    /// that hangs is retried — likely on another — while the lease lives.
    pub fn attempt_budget(&self, request_timeout: Duration) -> Duration {
        attempt_limit(&self.shared, request_timeout)
    }

    /// [`attempt_budget`](Self::attempt_budget) without the lease's remaining time (for
    /// requests that go on after the session is lost).
    pub fn attempt_cap(&self, request_timeout: Duration) -> Duration {
        attempt_cap(&self.shared, request_timeout)
    }

    /// The third of the TTL after which a waiter looks at the queue again, whatever its
    /// watch says (a watch on a hung member says nothing).
    pub fn relook_period(&self) -> Duration {
        ttl_part(&self.shared, 3).max(Duration::from_millis(100))
    }

    /// Ends the session here and now (the lock was closed, or etcd refused to let us delete
    /// a key of ours, so the lease must expire to take it away). The keep-alive task stops.
    pub fn abandon(&self, why: String) {
        self.shared.mark_lost(Lost {
            why,
            cause: Cause::GivenUp,
        });
        self.task.abort();
    }

    /// Records that etcd refused a request because our lease does not exist.
    pub fn gone(&self, e: &etcd_client::Error) {
        self.shared.mark_lost(Lost {
            why: format!("etcd says our lease is gone ({e})"),
            cause: Cause::Gone,
        });
        self.task.abort();
    }

    /// Keeps `receipt` to delete with the next join.
    pub fn stale(&self, receipt: Vec<u8>) {
        self.stale.lock().unwrap().push(receipt);
    }

    /// Up to `n` receipts to delete (given back with [`unstale`](Self::unstale) if the join
    /// that was to delete them failed).
    pub fn take_stale(&self, n: usize) -> Vec<Vec<u8>> {
        let mut v = self.stale.lock().unwrap();
        let k = v.len().min(n);
        v.drain(..k).collect()
    }

    /// Gives back receipts from [`take_stale`](Self::take_stale).
    pub fn unstale(&self, receipts: Vec<Vec<u8>>) {
        self.stale.lock().unwrap().extend(receipts);
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
                        cause: Cause::Gone,
                    });
                }
                Renewal::Failed => {
                    tokio::time::sleep(Duration::from_millis(50).min(self.shared.remaining()))
                        .await;
                }
            }
        }
    }

    /// Runs `f` on the runtime that drives this session, in a task of its own: work that must
    /// go on whatever becomes of the caller (a dropped future, a drop outside any runtime).
    /// If the runtime is shutting down, `f` never runs (our lease then simply expires).
    pub fn spawn_on_runtime(
        &self,
        f: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        self.runtime.spawn(f)
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
