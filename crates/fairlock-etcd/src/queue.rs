//! The lock protocol on etcd: a FIFO queue of lease-bound keys ordered by create revision,
//! each waiter watching only its predecessor, and a grant record that tells the next holder
//! whether the last one released. See `docs/DESIGN.md`, "The etcd backend".
//!
//! Every step is a transaction whose guard compares our own queue key's create revision, so
//! nothing is done on behalf of a key that is gone (its lease expired: etcd#19597's waiter
//! that acquires after its lease died cannot happen here), and nothing is ever done to a key
//! of the same name created later (etcd#22082's retried unlock that deletes a newer holder's
//! key cannot happen either: keys carry a per-acquisition sequence number *and* every delete
//! compares the create revision).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};

use crate::error::{Error, Result, is_unavailable};
use crate::keys::{Held, Keys};
use crate::session::{Lost, Session, timed_out};

/// What every step needs: the client, the lock's keys, the timeouts.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub client: Client,
    pub keys: Keys,
    pub request_timeout: Duration,
    /// The endpoints, comma-separated, for errors.
    pub endpoints: String,
}

/// How long an acquisition may wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Until granted.
    Block,
    /// Not at all: withdraw if anyone is ahead.
    Try,
    /// Until this instant.
    Until(Instant),
}

impl Wait {
    fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(d) => Some(d),
            _ => None,
        }
    }
}

/// A granted lock.
#[derive(Debug)]
pub(crate) struct Grant {
    pub session: Arc<Session>,
    pub key: Vec<u8>,
    /// The key's create revision: our place in line, and the fencing token.
    pub token: i64,
    pub owner_died: bool,
    /// The grant record we wrote (`held TOKEN clean|died`), compared at release.
    pub record: String,
    /// Set when etcd showed our key gone while the session lived (someone deleted it).
    /// Relaxed: a flag read on its own.
    pub gone: AtomicBool,
}

/// Why a retried request stopped.
enum Stop {
    /// Our session ended.
    Lost(Lost),
    /// The caller's deadline passed.
    Deadline,
    /// etcd refused the request for a reason retrying will not change.
    Refused(etcd_client::Error),
    /// No answer before `limit` (the retry budget of a step that has no session to watch).
    Unreachable(etcd_client::Error),
}

/// Whether etcd refused a request because the lease it names does not exist.
fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.code() == tonic::Code::NotFound && s.message().contains("lease not found"))
}

/// Runs `f` until it answers, retrying on transient errors with a short backoff, while the
/// session (if given) lives, the caller's deadline (if any) has not passed and, if `limit`
/// is given, until then.
async fn retrying<T, Fut>(
    ctx: &Ctx,
    session: Option<&Session>,
    deadline: Option<Instant>,
    limit: Option<Instant>,
    mut f: impl FnMut() -> Fut,
) -> std::result::Result<T, Stop>
where
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut backoff = Duration::from_millis(20);
    loop {
        if let Some(l) = session.and_then(Session::lost) {
            return Err(Stop::Lost(l));
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Stop::Deadline);
        }
        let mut budget = ctx.request_timeout;
        for end in [deadline, limit].into_iter().flatten() {
            budget = budget.min(end.saturating_duration_since(now));
        }
        let err = match tokio::time::timeout(budget, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if lease_not_found(&e) => {
                if let Some(s) = session {
                    s.gone(&e);
                    continue;
                }
                return Err(Stop::Refused(e));
            }
            Ok(Err(e)) if !is_unavailable(&e) => return Err(Stop::Refused(e)),
            Ok(Err(e)) => e,
            Err(_) => timed_out(budget),
        };
        if limit.is_some_and(|l| Instant::now() >= l) {
            return Err(Stop::Unreachable(err));
        }
        let mut nap = backoff;
        for end in [deadline, limit].into_iter().flatten() {
            nap = nap.min(end.saturating_duration_since(Instant::now()));
        }
        tokio::time::sleep(nap).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

impl Ctx {
    fn lost_error(&self, l: Lost, doing: &str) -> Error {
        if l.unreachable {
            Error::Unavailable {
                endpoints: self.endpoints.clone(),
                op: "keeping our lease alive",
                source: etcd_client::Error::LeaseKeepAliveError(format!("{doing}: {}", l.why)),
            }
        } else {
            Error::LockLost {
                name: self.keys.name.clone(),
                why: format!("{doing}: {}", l.why),
            }
        }
    }

    /// A holder's lost session is always `LockLost`, whatever the cause.
    fn lost_holder(&self, l: Lost, doing: &str) -> Error {
        Error::LockLost {
            name: self.keys.name.clone(),
            why: format!("{doing}: {}", l.why),
        }
    }

    fn stop_error(&self, stop: Stop, op: &'static str, doing: &str) -> Error {
        match stop {
            Stop::Lost(l) => self.lost_error(l, doing),
            Stop::Deadline => Error::Timeout {
                name: self.keys.name.clone(),
            },
            Stop::Refused(source) => Error::Etcd {
                name: self.keys.name.clone(),
                op,
                source,
            },
            Stop::Unreachable(source) => Error::Unavailable {
                endpoints: self.endpoints.clone(),
                op,
                source,
            },
        }
    }

    fn gone(&self, doing: &str, key: &[u8], token: i64) -> Error {
        Error::LockLost {
            name: self.keys.name.clone(),
            why: format!(
                "{doing}: our queue key {} (revision {token}) is gone (our lease expired, or \
                 the key was deleted)",
                String::from_utf8_lossy(key)
            ),
        }
    }

    async fn txn(&self, txn: Txn) -> std::result::Result<TxnResponse, etcd_client::Error> {
        self.client.kv_client().txn(txn).await
    }
}

fn mine(key: &[u8], token: i64) -> Compare {
    Compare::create_revision(key.to_vec(), CompareOp::Equal, token)
}

fn gets(resp: &TxnResponse) -> Vec<Vec<etcd_client::KeyValue>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
            _ => None,
        })
        .collect()
}

/// Joins the queue: creates our key under our lease (idempotently: a retry after a lost
/// answer finds the key it created) and returns its create revision.
async fn enqueue(
    ctx: &Ctx,
    session: &Session,
    key: &[u8],
    value: &str,
    deadline: Option<Instant>,
) -> Result<i64> {
    let resp = retrying(ctx, Some(session), deadline, None, || {
        ctx.txn(
            Txn::new()
                .when([Compare::create_revision(key.to_vec(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.to_vec(),
                    value,
                    Some(PutOptions::new().with_lease(session.id())),
                )])
                .or_else([TxnOp::get(key.to_vec(), None)]),
        )
    })
    .await
    .map_err(|s| ctx.stop_error(s, "joining the queue", "while joining the queue"))?;
    if resp.succeeded() {
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        return Ok(rev);
    }
    match gets(&resp).first().and_then(|kvs| kvs.first()) {
        Some(kv) => Ok(kv.create_revision()),
        None => Err(ctx.gone("while joining the queue", key, 0)),
    }
}

/// Leaves the queue without having been granted: deletes our key if it is still ours. If
/// that cannot be done, the session is abandoned so that the lease (and the key) expires.
async fn withdraw(ctx: &Ctx, session: &Session, key: &[u8], token: i64) {
    let limit = Instant::now() + ctx.request_timeout;
    let r = retrying(ctx, None, None, Some(limit), || {
        ctx.txn(
            Txn::new()
                .when([mine(key, token)])
                .and_then([TxnOp::delete(key.to_vec(), None)]),
        )
    })
    .await;
    if r.is_err() {
        session.abandon("a queue key could not be withdrawn; the lease must expire".into());
    }
}

/// Deletes our key when an acquisition is abandoned part-way (its future dropped, or an
/// error after the key was created).
struct WithdrawOnDrop<'a> {
    ctx: &'a Ctx,
    session: &'a Arc<Session>,
    key: &'a [u8],
    token: i64,
    armed: bool,
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (ctx, session, key, token) = (
            self.ctx.clone(),
            self.session.clone(),
            self.key.to_vec(),
            self.token,
        );
        // In the session's runtime: this drop may run in a future being cancelled.
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move { withdraw(&ctx, &session, &key, token).await });
        } else {
            session.abandon("an acquisition was abandoned outside its runtime".into());
        }
    }
}

/// Waits until `pred` is deleted (any revision after `from`), or the watch ends; returns
/// `Ok` to have the queue looked at again.
async fn deleted(ctx: &Ctx, pred: &[u8], from: i64) -> std::result::Result<(), etcd_client::Error> {
    let mut watch = ctx.client.watch_client();
    let mut stream = watch
        .watch(
            pred.to_vec(),
            Some(
                WatchOptions::new()
                    .with_start_revision(from)
                    .with_filters([WatchFilterType::NoPut]),
            ),
        )
        .await?;
    loop {
        match stream.message().await? {
            None => {
                return Err(etcd_client::Error::WatchError(
                    "the watch stream closed".into(),
                ));
            }
            // Cancelled (compacted past `from`, or the member lost its leader): look again.
            Some(r) if r.canceled() => return Ok(()),
            Some(r)
                if r.events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete) =>
            {
                return Ok(());
            }
            Some(_) => {}
        }
    }
}

/// Acquires the lock: joins the queue, waits for every earlier key to go, then writes the
/// grant record.
pub(crate) async fn acquire(
    ctx: &Ctx,
    session: Arc<Session>,
    key: Vec<u8>,
    value: String,
    wait: Wait,
) -> Result<Grant> {
    let deadline = wait.deadline();
    let token = enqueue(ctx, &session, &key, &value, deadline).await?;
    let mut undo = WithdrawOnDrop {
        ctx,
        session: &session,
        key: &key,
        token,
        armed: true,
    };
    let mut backoff = Duration::from_millis(20);
    let held = loop {
        // One snapshot: is our key still ours, who is just ahead of us, what does the
        // grant record say.
        let resp = retrying(ctx, Some(&session), deadline, None, || {
            ctx.txn(
                Txn::new().when([mine(&key, token)]).and_then([
                    TxnOp::get(
                        ctx.keys.queue.clone(),
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_max_create_revision(token - 1)
                                .with_sort(SortTarget::Create, SortOrder::Descend)
                                .with_limit(1)
                                .with_keys_only(),
                        ),
                    ),
                    TxnOp::get(ctx.keys.held.clone(), None),
                ]),
            )
        })
        .await;
        let resp = match resp {
            Ok(r) => r,
            Err(Stop::Deadline) => {
                undo.armed = false;
                withdraw(ctx, &session, &key, token).await;
                return Err(ctx.stop_error(Stop::Deadline, "", ""));
            }
            Err(s) => return Err(ctx.stop_error(s, "looking at the queue", "while waiting")),
        };
        if !resp.succeeded() {
            undo.armed = false;
            return Err(ctx.gone("while waiting", &key, token));
        }
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let got = gets(&resp);
        let pred = got
            .first()
            .and_then(|kvs| kvs.first())
            .map(|kv| kv.key().to_vec());
        let held = match got.get(1).and_then(|kvs| kvs.first()) {
            Some(kv) => Some(Held::decode(&ctx.keys.name, kv.value())?),
            None => None,
        };
        let Some(pred) = pred else { break held };
        if let Wait::Try = wait {
            undo.armed = false;
            withdraw(ctx, &session, &key, token).await;
            return Err(Error::WouldBlock {
                name: ctx.keys.name.clone(),
            });
        }
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = deleted(ctx, &pred, rev + 1) => match r {
                Ok(()) => backoff = Duration::from_millis(20),
                Err(e) if is_unavailable(&e) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(ctx.stop_error(Stop::Refused(e), "watching our predecessor", "")),
            },
            l = session.until_lost() => {
                return Err(ctx.lost_error(l, "our own lease ended while we waited"));
            }
            () = until => {
                undo.armed = false;
                withdraw(ctx, &session, &key, token).await;
                return Err(Error::Timeout { name: ctx.keys.name.clone() });
            }
        }
    };
    // Nobody is ahead of us, and nobody can get ahead (new keys have larger revisions).
    // Whether the last holder released is in the record; a retried claim finds its own
    // record and the same verdict.
    let owner_died = held.is_some_and(|h| h.verdict_for(token));
    let record = Held::Held { token, owner_died }.encode();
    let resp = retrying(ctx, Some(&session), None, None, || {
        ctx.txn(Txn::new().when([mine(&key, token)]).and_then([TxnOp::put(
            ctx.keys.held.clone(),
            record.as_str(),
            None,
        )]))
    })
    .await
    .map_err(|s| ctx.stop_error(s, "writing the grant record", "while being granted"))?;
    if !resp.succeeded() {
        undo.armed = false;
        return Err(ctx.gone("while being granted", &key, token));
    }
    undo.armed = false;
    drop(undo);
    Ok(Grant {
        session,
        key,
        token,
        owner_died,
        record,
        gone: AtomicBool::new(false),
    })
}

/// Releases a grant: deletes our key and records the release, in one transaction that
/// checks the key and the record are still ours. A release retried after a lost answer
/// finds its own `released` record and succeeds.
pub(crate) async fn release(ctx: &Ctx, grant: &Grant) -> Result<()> {
    let lost = grant.session.lost();
    let released = Held::Released { token: grant.token }.encode();
    let limit = Instant::now() + ctx.request_timeout * 2;
    let r = retrying(ctx, None, None, Some(limit), || {
        ctx.txn(
            Txn::new()
                .when([
                    mine(&grant.key, grant.token),
                    Compare::value(
                        ctx.keys.held.clone(),
                        CompareOp::Equal,
                        grant.record.as_str(),
                    ),
                ])
                .and_then([
                    TxnOp::delete(grant.key.clone(), None),
                    TxnOp::put(ctx.keys.held.clone(), released.as_str(), None),
                ])
                .or_else([TxnOp::get(ctx.keys.held.clone(), None)]),
        )
    })
    .await;
    if let Some(l) = lost {
        // Whatever the transaction did, the lease was past its deadline here before the
        // release: the lock may have been someone else's, and we said so (or will).
        return Err(ctx.lost_holder(l, "before unlock"));
    }
    let resp = match r {
        Ok(r) => r,
        Err(s) => {
            // The key may still be there, kept alive by our session: give the session up so
            // that it expires within the TTL.
            grant
                .session
                .abandon("the release could not be written; the lease must expire".into());
            return Err(ctx.stop_error(s, "releasing", "while releasing"));
        }
    };
    if resp.succeeded() {
        return Ok(());
    }
    let held = gets(&resp)
        .first()
        .and_then(|kvs| kvs.first())
        .map(|kv| Held::decode(&ctx.keys.name, kv.value()))
        .transpose()?;
    if held == Some(Held::Released { token: grant.token }) {
        return Ok(());
    }
    Err(ctx.gone("at unlock", &grant.key, grant.token))
}

/// The local check: is the grant still ours, as far as we know without asking etcd.
pub(crate) fn check(ctx: &Ctx, grant: &Grant) -> Result<()> {
    if let Some(l) = grant.session.lost() {
        return Err(ctx.lost_holder(l, "at check"));
    }
    if grant.gone.load(Ordering::Relaxed) {
        return Err(ctx.gone("at check", &grant.key, grant.token));
    }
    Ok(())
}

/// Checks with etcd that our key is still there (after a keep-alive round trip).
pub(crate) async fn confirm(ctx: &Ctx, grant: &Grant) -> Result<()> {
    grant
        .session
        .renew_now()
        .await
        .map_err(|l| ctx.lost_holder(l, "at extend"))?;
    let resp = retrying(ctx, Some(&grant.session), None, None, || {
        ctx.txn(Txn::new().when([mine(&grant.key, grant.token)]))
    })
    .await
    .map_err(|s| match s {
        Stop::Lost(l) => ctx.lost_holder(l, "at extend"),
        s => ctx.stop_error(s, "checking our key", "at extend"),
    })?;
    if !resp.succeeded() {
        grant.gone.store(true, Ordering::Relaxed);
        return Err(ctx.gone("at extend", &grant.key, grant.token));
    }
    Ok(())
}
