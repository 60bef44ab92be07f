//! The lock protocol on etcd: a FIFO queue of lease-bound keys ordered by create revision,
//! each waiter watching only its predecessor, and a grant record that tells the next holder
//! whether the last one released. See `docs/DESIGN.md`, "The etcd backend".
//!
//! Every step that can act for a queue key is a transaction whose guard compares the key's
//! create revision (or, for the join, that neither the key nor the acquisition's receipt
//! exists), so nothing is done on behalf of a key that is gone (its lease expired: etcd#19597's
//! waiter that acquires after its lease died cannot happen here), and nothing is ever done to
//! a key of the same name created later (etcd#22082's retried unlock that deletes a newer
//! holder's key cannot happen either: keys carry a per-acquisition sequence number *and* every
//! release compares the create revision). A withdraw deletes by name: the name is its own
//! acquisition's alone, so whatever key has it is that acquisition's.
//!
//! What must happen even if the caller stops waiting — withdrawing a key, releasing a grant —
//! runs in a task of its own on the session's runtime, retried for as long as the session
//! lives: a dropped future, a deadline or a request timeout never leaves a key behind, and a
//! slow cluster never costs the other users of the session (clones of the lock) their lease.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use tokio::sync::oneshot;

use crate::error::{Error, Result, is_unavailable};
use crate::keys::{Held, Keys};
use crate::session::{Cause, Lost, Session, timed_out};

/// How long a caller that gives up (deadline, `try_lock`) waits for its withdraw before
/// returning: long enough for a healthy cluster (a round trip or two), so that the key is
/// gone when the call returns; short enough to keep the caller's deadline. The withdraw goes
/// on in its task either way.
const WITHDRAW_WAIT: Duration = Duration::from_millis(100);

/// A hedged request (see [`race`]) sends another copy this long after the last while none has
/// answered, with at most [`MAX_COPIES`] pending at once.
const HEDGE: Duration = Duration::from_millis(200);
const MAX_COPIES: usize = 4;

/// The most stale receipts one join deletes (etcd refuses transactions of more than 128
/// operations by default).
const STALE_PER_JOIN: usize = 32;

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

/// How one acquisition is bounded, fixed when it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The caller's deadline: once passed, `Timeout`.
    pub deadline: Option<Instant>,
    /// For a single try: etcd must have answered by then, else `Unavailable` (a `try_lock`
    /// is one request timeout, not the lifetime of our lease).
    pub limit: Option<Instant>,
    /// Whether to wait behind earlier keys (else: give up as soon as one is seen).
    waits: bool,
    /// A single try that finds someone ahead says `Timeout` (a deadline already past), not
    /// `WouldBlock` (`try_lock`).
    busy_is_timeout: bool,
}

impl Wait {
    /// The bounds of an acquisition starting now. A deadline that has already passed
    /// (`lock_timeout(ZERO)`, `lock_until` in the past) makes one try, as `try_lock` does: the
    /// local lock documents `lock_timeout(ZERO)` as "takes the lock if granted at once", and
    /// `fairlock run -w 0` must take a free lock. A deadline still ahead bounds every step.
    pub fn bounds(self, request_timeout: Duration) -> Bounds {
        let now = Instant::now();
        let single = |busy_is_timeout| Bounds {
            deadline: None,
            limit: now.checked_add(request_timeout),
            waits: false,
            busy_is_timeout,
        };
        match self {
            Wait::Block => Bounds {
                deadline: None,
                limit: None,
                waits: true,
                busy_is_timeout: false,
            },
            Wait::Try => single(false),
            Wait::Until(d) if d <= now => single(true),
            Wait::Until(d) => Bounds {
                deadline: Some(d),
                limit: None,
                waits: true,
                busy_is_timeout: true,
            },
        }
    }
}

/// A granted lock.
#[derive(Debug)]
pub(crate) struct Grant {
    pub session: Arc<Session>,
    pub key: Vec<u8>,
    /// The acquisition's receipt (see `keys`).
    pub receipt: Vec<u8>,
    /// The key's create revision: our place in line, and the fencing token.
    pub token: i64,
    pub owner_died: bool,
    /// The grant record we wrote (`held TOKEN clean|died`), compared at release.
    pub record: String,
    /// Whether a join attempt of this acquisition went unanswered: it may still be applied
    /// late, so the receipt that fences it off must stay as long as the lease.
    pub uncertain: bool,
    /// Set when etcd showed our key gone while the session lived (someone deleted it).
    /// Relaxed: a flag read on its own.
    pub gone: AtomicBool,
}

/// An acquisition that failed.
pub(crate) struct Failed {
    pub error: Error,
    /// etcd said our lease does not exist when we tried to join (revoked or expired on the
    /// server before our keep-alive noticed): nothing was created, and a new lease may do.
    pub stale_lease: bool,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed {
            error,
            stale_lease: false,
        }
    }
}

/// Why a retried request stopped.
enum Stop {
    /// Our session ended.
    Lost(Lost),
    /// The caller's deadline passed.
    Deadline,
    /// etcd refused the request for a reason retrying will not change.
    Refused(etcd_client::Error),
    /// No answer before `limit` (a single try's budget, or a step without a session).
    Unreachable(etcd_client::Error),
}

/// Whether etcd refused a request because the lease it names does not exist.
fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.code() == tonic::Code::NotFound && s.message().contains("lease not found"))
}

/// One attempt of a request, within `window`: `f` once, or — `hedged` — another copy of it
/// every [`HEDGE`] while none has answered, the earlier ones still pending (at most
/// [`MAX_COPIES`]); the first answer wins. etcd-client's balancer sends each request to a
/// member picked at random (it sees every endpoint's load as 0), and a member that hangs keeps
/// its connection open and looks ready until HTTP/2 keep-alive gives it up seconds later:
/// copies sent one after the other each had a fair chance of going to it again, a whole
/// attempt budget apiece, which is what made hand-offs through a client connected to a hung
/// member take seconds. Only idempotent requests are hedged: reads, and writes whose guard
/// fails once they have been applied (a late copy does nothing).
async fn race<T, Fut>(
    f: &mut impl FnMut() -> Fut,
    window: Duration,
    hedged: bool,
) -> std::result::Result<T, etcd_client::Error>
where
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let start = tokio::time::Instant::now();
    let close = tokio::time::sleep_until(start + window);
    // The first copy goes at once: a timer due now fires only at the timer wheel's next
    // millisecond tick, which added about a millisecond to every request.
    let tick = tokio::time::sleep_until(start + if hedged { HEDGE } else { window });
    tokio::pin!(close, tick);
    let mut copies: Vec<Pin<Box<Fut>>> = vec![Box::pin(f())];
    let mut last = None;
    enum Event<T> {
        Done(std::result::Result<T, etcd_client::Error>),
        Tick,
        Closed,
    }
    loop {
        let event = std::future::poll_fn(|cx| {
            for i in 0..copies.len() {
                if let Poll::Ready(r) = copies[i].as_mut().poll(cx) {
                    drop(copies.swap_remove(i));
                    return Poll::Ready(Event::Done(r));
                }
            }
            if close.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Closed);
            }
            if tick.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Tick);
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Done(Ok(v)) => return Ok(v),
            // A transient failure with no other copy pending (a refused connection, no
            // leader) goes back to the caller, whose backoff (from 20 ms) beats the tick.
            Event::Done(Err(e)) if !hedged || !is_unavailable(&e) || copies.is_empty() => {
                return Err(e);
            }
            // Others are pending: one of them may still answer.
            Event::Done(Err(e)) => last = Some(e),
            Event::Tick => {
                if copies.len() < MAX_COPIES && hedged {
                    copies.push(Box::pin(f()));
                }
                // Unhedged: one copy, after which only its answer or `close` ends the attempt.
                let next = if hedged { HEDGE } else { window };
                tick.as_mut().reset(tokio::time::Instant::now() + next);
            }
            Event::Closed => return Err(last.unwrap_or_else(|| timed_out(window))),
        }
    }
}

/// Runs `f` until it answers, retrying on transient errors with a short backoff, while the
/// session (if given) lives, the caller's deadline (if any) has not passed and, if `limit`
/// is given, until then. Each attempt (see [`race`]) waits at most the session's attempt
/// budget (a sixth of the TTL, the request timeout, what is left of the lease), or the
/// request timeout without a session, and never past the deadline or the limit.
async fn retrying<T, Fut>(
    ctx: &Ctx,
    session: Option<&Session>,
    deadline: Option<Instant>,
    limit: Option<Instant>,
    hedged: bool,
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
        let mut budget = match session {
            Some(s) => s.attempt_budget(ctx.request_timeout),
            None => ctx.request_timeout,
        };
        for end in [deadline, limit].into_iter().flatten() {
            budget = budget.min(end.saturating_duration_since(now));
        }
        let err = match race(&mut f, budget, hedged).await {
            Ok(v) => return Ok(v),
            Err(e) if lease_not_found(&e) => {
                if let Some(s) = session {
                    s.gone(&e);
                    continue;
                }
                return Err(Stop::Refused(e));
            }
            Err(e) if !is_unavailable(&e) => return Err(Stop::Refused(e)),
            Err(e) => e,
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

/// Why [`persist`] gave up.
enum GaveUp {
    /// etcd refused the request for a reason retrying will not change.
    Refused(etcd_client::Error),
    /// The session ended, and a request timeout more went by without an answer: the lease
    /// expires (or has) and takes our keys with it.
    SessionOver(etcd_client::Error),
}

/// Runs `f` until etcd answers, retrying transient failures for as long as the session lives,
/// and a request timeout more once it is lost (our local deadline comes before the server's;
/// a key deleted now is a key the others need not wait out). For the steps that must happen
/// whoever still waits for them: withdraws and releases, in tasks of their own.
async fn persist<T, Fut>(
    ctx: &Ctx,
    session: &Session,
    mut f: impl FnMut() -> Fut,
) -> std::result::Result<T, GaveUp>
where
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut backoff = Duration::from_millis(20);
    let mut lost_at: Option<Instant> = None;
    loop {
        let budget = session.attempt_cap(ctx.request_timeout);
        let err = match race(&mut f, budget, true).await {
            Ok(v) => return Ok(v),
            Err(e) if !is_unavailable(&e) => return Err(GaveUp::Refused(e)),
            Err(e) => e,
        };
        if session.lost().is_some()
            && lost_at.get_or_insert_with(Instant::now).elapsed() >= ctx.request_timeout
        {
            return Err(GaveUp::SessionOver(err));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

impl Ctx {
    fn lost_error(&self, l: Lost, doing: &str) -> Error {
        if l.cause == Cause::Unreachable {
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
            Stop::Deadline => self.timeout(),
            Stop::Refused(source) => Error::Etcd {
                name: self.keys.name.clone(),
                op,
                source,
            },
            Stop::Unreachable(source) => self.unavailable(op, source),
        }
    }

    fn timeout(&self) -> Error {
        Error::Timeout {
            name: self.keys.name.clone(),
        }
    }

    fn unavailable(&self, op: &'static str, source: etcd_client::Error) -> Error {
        Error::Unavailable {
            endpoints: self.endpoints.clone(),
            op,
            source,
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

fn absent(key: &[u8]) -> Compare {
    Compare::create_revision(key.to_vec(), CompareOp::Equal, 0)
}

fn leased(session: &Session) -> Option<PutOptions> {
    Some(PutOptions::new().with_lease(session.id()))
}

/// The part of a join that grants the lock there and then when the queue was empty before
/// the join (the compares of a transaction, nested ones included, all read the store as it
/// was before the transaction: nobody held or waited) and the grant record is absent or one
/// of ours: it writes our record, `held @ENTRY died` if the record says a holder never
/// released, `held @ENTRY clean` otherwise (see `Held`). A record that is neither (written by
/// hand, garbage) grants nothing here: the acquisition goes on to its look, which reports it.
/// The compare over the queue's prefix reads every key of it, as the join's sorted read does.
/// When the queue was not empty, `first_look` (the join's first look's reads) runs instead:
/// an uncontended join reads nothing.
fn grant_if_first(ctx: &Ctx, key: &[u8], first_look: [TxnOp; 2]) -> TxnOp {
    let held = || ctx.keys.held.clone();
    // The record starts with `WORD ` (and has more): `WORD ` < record < `WORD!`.
    let starts = |word: &str| {
        [
            Compare::value(held(), CompareOp::Greater, format!("{word} ")),
            Compare::value(held(), CompareOp::Less, format!("{word}!")),
        ]
    };
    let put = |died| TxnOp::put(held(), Held::joined(key, died), None);
    let absent_record = Txn::new()
        .when([absent(&ctx.keys.held)])
        .and_then([put(false)]);
    let released = Txn::new()
        .when(starts("released"))
        .and_then([put(false)])
        .or_else([TxnOp::txn(absent_record)]);
    let held_by = Txn::new()
        .when(starts("held"))
        .and_then([put(true)])
        .or_else([TxnOp::txn(released)]);
    let queue_empty =
        Compare::create_revision(ctx.keys.queue.clone(), CompareOp::Equal, 0).with_prefix();
    TxnOp::txn(
        Txn::new()
            .when([queue_empty])
            .and_then([TxnOp::txn(held_by)])
            .or_else(first_look),
    )
}

/// The answer of the last transaction nested in `resp` (the join's [`grant_if_first`], and
/// each level nested in that).
fn nested_answer(resp: &TxnResponse) -> Option<TxnResponse> {
    resp.op_responses()
        .into_iter()
        .rev()
        .find_map(|op| match op {
            TxnOpResponse::Txn(t) => Some(t),
            _ => None,
        })
}

/// What [`grant_if_first`] did, from the join's answer: `Some(owner_died)` if it granted the
/// lock.
fn granted_at_join(resp: &TxnResponse) -> Option<bool> {
    let nested = nested_answer;
    let first = nested(resp)?;
    if !first.succeeded() {
        return None; // someone held or waited
    }
    let held_by = nested(&first)?;
    if held_by.succeeded() {
        return Some(true);
    }
    let released = nested(&held_by)?;
    if released.succeeded() {
        return Some(false);
    }
    let absent_record = nested(&released)?;
    absent_record.succeeded().then_some(false)
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

/// What a join found.
struct Joined {
    token: i64,
    /// Every attempt answered (only one was made, or the others were answered too): no copy
    /// of the join can be applied later.
    certain: bool,
    /// The answer of the join that created our key. When the queue was not empty, it read
    /// right after creating the key, in its own transaction, the queue's two newest keys (ours
    /// first) and the grant record, at the join's revision: the first look's answer (see
    /// [`acquire`]), so an acquisition whose predecessors leave before it looks needs no look
    /// of its own. `None` when the answer came from a retry that found our key already there.
    seen: Option<TxnResponse>,
    /// `Some(owner_died)` if the join found the queue empty and granted us the lock there and
    /// then, writing our grant record (see [`grant_if_first`]).
    granted: Option<bool>,
}

/// Joins the queue: creates our key under our lease unless it exists (a retry after a lost
/// answer finds the key it created) or our receipt does (the acquisition is over: this is a
/// late copy of the join, and creates nothing); returns the key's create revision. Also
/// deletes receipts that nothing can need any more, at no extra request.
async fn enqueue(
    ctx: &Ctx,
    session: &Session,
    key: &[u8],
    receipt: &[u8],
    value: &str,
    b: Bounds,
) -> std::result::Result<Joined, (Stop, bool)> {
    let stale = session.take_stale(STALE_PER_JOIN);
    // Attempts sent, and attempts whose fate we know (an answer, or a definite refusal). A
    // timeout or a transport error leaves the fate unknown: the request may still be applied.
    // Relaxed: counters read after the attempts are over.
    let (sent, known) = (AtomicU32::new(0), AtomicU32::new(0));
    // Not hedged: a join attempt left pending when another answers is one whose fate we do
    // not know, and each such acquisition keeps its receipt for as long as the lease.
    let r = retrying(ctx, Some(session), b.deadline, b.limit, false, || {
        sent.fetch_add(1, Ordering::Relaxed);
        let mut then = vec![TxnOp::put(key.to_vec(), value, leased(session))];
        let mut otherwise = vec![TxnOp::get(key.to_vec(), None)];
        for r in &stale {
            then.push(TxnOp::delete(r.clone(), None));
            otherwise.push(TxnOp::delete(r.clone(), None));
        }
        // The grant when the queue is empty; else the first look, read after the put in the
        // same transaction: the key just created is the newest of the queue, so the one after
        // it (by create revision) is the key just ahead of ours, as `look` asks for it.
        then.push(grant_if_first(
            ctx,
            key,
            [
                TxnOp::get(
                    ctx.keys.queue.clone(),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Create, SortOrder::Descend)
                            .with_limit(2)
                            .with_keys_only(),
                    ),
                ),
                TxnOp::get(ctx.keys.held.clone(), None),
            ],
        ));
        let txn = Txn::new()
            .when([absent(key), absent(receipt)])
            .and_then(then)
            .or_else(otherwise);
        let known = &known;
        async move {
            let r = ctx.txn(txn).await;
            if !matches!(&r, Err(e) if is_unavailable(e)) {
                known.fetch_add(1, Ordering::Relaxed);
            }
            r
        }
    })
    .await;
    let certain = sent.load(Ordering::Relaxed) == known.load(Ordering::Relaxed);
    let resp = match r {
        Ok(resp) => resp,
        Err(stop) => {
            session.unstale(stale);
            return Err((stop, certain));
        }
    };
    if resp.succeeded() {
        let token = resp.header().map(|h| h.revision()).unwrap_or(0);
        return Ok(Joined {
            token,
            certain,
            granted: granted_at_join(&resp),
            seen: Some(resp),
        });
    }
    match gets(&resp).first().and_then(|kvs| kvs.first()) {
        Some(kv) => Ok(Joined {
            token: kv.create_revision(),
            certain,
            seen: None,
            granted: None,
        }),
        // Neither created nor there: deleted between two of our attempts (by hand).
        None => Err((
            Stop::Lost(Lost {
                why: format!(
                    "our queue key {} was deleted as we joined",
                    String::from_utf8_lossy(key)
                ),
                cause: Cause::GivenUp,
            }),
            certain,
        )),
    }
}

/// A withdraw to make: see [`withdraw`].
struct Withdrawal {
    key: Vec<u8>,
    receipt: Vec<u8>,
    /// `(our clean grant record, its released form)`, each: if the grant record is the first
    /// (ours, written though the caller never got the guard), it becomes the second. A
    /// released form not known yet (`None`: the join's own record, whose token we never
    /// learnt) is read from the record: its mod revision is its token.
    release: Vec<(String, Option<String>)>,
    /// Write the receipt: a join attempt may still be applied late.
    fence: bool,
}

/// Leaves the queue without handing a grant to the caller, in one transaction: deletes our key
/// by name (whatever key has this name is ours, a late copy of our join included); writes our
/// receipt (`withdrawn`, under our lease) if a join attempt of ours may still be applied, whose
/// guard then fails; and turns our own `held TOKEN clean` grant record into `released TOKEN`,
/// as a release would, so that the next holder is not told a holder died (none did, and the
/// acquisition never did anything under the lock). A `held TOKEN died` record stays: the
/// next holder must still be told what the one before us left half-done.
///
/// Retried for as long as the session lives (see [`persist`]). Only if etcd refuses it for
/// good is the session given up, so that the lease expires and takes the key with it.
async fn withdraw(ctx: Ctx, session: Arc<Session>, w: Withdrawal) {
    let mut fence = w.fence;
    // Each take-back: (our record, its revision if it must not have changed since, what it
    // becomes). One whose released form is not known reads the record first: if it is ours,
    // its revision is our token (see `Held`).
    let mut take_backs = Vec::new();
    for (record, released) in &w.release {
        match released {
            Some(r) => take_backs.push((record.clone(), None, r.clone())),
            None => {
                let read = persist(&ctx, &session, || {
                    ctx.txn(Txn::new().and_then([TxnOp::get(ctx.keys.held.clone(), None)]))
                })
                .await;
                let kv = read.ok().and_then(|resp| {
                    gets(&resp)
                        .into_iter()
                        .next()
                        .and_then(|kvs| kvs.into_iter().next())
                });
                if let Some(kv) = kv
                    && kv.value() == record.as_bytes()
                {
                    let token = kv.mod_revision();
                    take_backs.push((
                        record.clone(),
                        Some(token),
                        Held::Released { token }.encode(),
                    ));
                }
            }
        }
    }
    loop {
        let r = persist(&ctx, &session, || {
            let mut ops = vec![TxnOp::delete(w.key.clone(), None)];
            if fence {
                ops.push(TxnOp::put(w.receipt.clone(), "withdrawn", leased(&session)));
            }
            // One chain (if the record is the first of ours, …, else if it is the second, …):
            // etcd refuses a transaction that may write one key twice, but not two writes in
            // the two branches of one comparison.
            let chain = take_backs
                .iter()
                .rev()
                .fold(None, |rest, (record, rev, released)| {
                    let mut ours = vec![Compare::value(
                        ctx.keys.held.clone(),
                        CompareOp::Equal,
                        record.as_str(),
                    )];
                    if let Some(rev) = rev {
                        ours.push(Compare::mod_revision(
                            ctx.keys.held.clone(),
                            CompareOp::Equal,
                            *rev,
                        ));
                    }
                    let take_back = Txn::new().when(ours).and_then([TxnOp::put(
                        ctx.keys.held.clone(),
                        released.as_str(),
                        None,
                    )]);
                    Some(match rest {
                        Some(rest) => take_back.or_else([TxnOp::txn(rest)]),
                        None => take_back,
                    })
                });
            if let Some(chain) = chain {
                ops.push(TxnOp::txn(chain));
            }
            ctx.txn(Txn::new().and_then(ops))
        })
        .await;
        match r {
            Ok(_) | Err(GaveUp::SessionOver(_)) => return,
            // Our lease is gone, our key with it, and no join can be applied under it: what
            // is left to do is the grant record.
            Err(GaveUp::Refused(e)) if fence && lease_not_found(&e) => fence = false,
            Err(GaveUp::Refused(e)) => {
                session.abandon(format!(
                    "etcd refused to delete our queue key {} ({e}); the lease must expire",
                    String::from_utf8_lossy(&w.key)
                ));
                return;
            }
        }
    }
}

/// Undoes an acquisition that stops before handing its grant to the caller: an error, a
/// deadline, `try_lock` finding someone ahead, or its future dropped at any point — armed
/// before the first join attempt is sent, since that attempt may be applied even if we never
/// see its answer.
struct Undo {
    ctx: Ctx,
    session: Arc<Session>,
    key: Vec<u8>,
    receipt: Vec<u8>,
    /// Our grant records that say `clean`, and what each becomes when taken back (set before
    /// it is written: the write may be applied though its answer never comes; `None`: not
    /// known yet, see [`Withdrawal::release`]). The join's own (`held @ENTRY clean`, see
    /// [`grant_if_first`]) from the start; the grant step's once it is sent.
    clean_records: Vec<(String, Option<String>)>,
    /// A join attempt may still be applied late (until the join says otherwise).
    uncertain: bool,
    armed: bool,
}

impl Undo {
    /// Starts the withdraw, once, in a task of its own: no caller can cancel it.
    fn start(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        if !std::mem::replace(&mut self.armed, false) {
            return None;
        }
        let w = Withdrawal {
            key: self.key.clone(),
            receipt: self.receipt.clone(),
            release: self.clean_records.clone(),
            fence: self.uncertain,
        };
        Some(
            self.session
                .spawn_on_runtime(withdraw(self.ctx.clone(), self.session.clone(), w)),
        )
    }

    /// Starts the withdraw and waits for it a moment ([`WITHDRAW_WAIT`]).
    async fn finish(&mut self) {
        if let Some(h) = self.start() {
            let _ = tokio::time::timeout(WITHDRAW_WAIT, h).await;
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        self.start();
    }
}

/// Waits until `pred`, which our look saw alive at revision `seen`, is deleted, or the watch
/// ends; returns `Ok` to have the queue looked at again.
///
/// The watch starts at the store's current revision, not at `seen + 1`: etcd 3.4 serves a
/// watch created at a revision it has already passed as "unsynced", caught up by a loop that
/// runs every 100 ms, and with a few clients the store nearly always moved on between our
/// look and the watch (the etcdbench run of 40b744d saw hand-offs stall up to ~100 ms, and
/// `etcd_debugging_mvcc_slow_watcher_total` above 0 on most samples). The gap is closed by
/// hand instead: the watch reports every deletion after the revision of its `created`
/// response; if that revision is past `seen`, one count-only read of `pred` (made after the
/// creation, so at a revision at least as high) tells whether it went in between.
async fn deleted(ctx: &Ctx, pred: &[u8], seen: i64) -> std::result::Result<(), etcd_client::Error> {
    let mut watch = ctx.client.watch_client();
    let mut stream = watch
        .watch(
            pred.to_vec(),
            Some(WatchOptions::new().with_filters([WatchFilterType::NoPut])),
        )
        .await?;
    loop {
        match stream.message().await? {
            None => {
                return Err(etcd_client::Error::WatchError(
                    "the watch stream closed".into(),
                ));
            }
            // Cancelled (the member lost its leader, or compaction): look again.
            Some(r) if r.canceled() => return Ok(()),
            Some(r)
                if r.events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete) =>
            {
                return Ok(());
            }
            Some(r) if r.created() => {
                let from = r.header().map_or(i64::MAX, |h| h.revision());
                if from > seen {
                    let now = ctx
                        .client
                        .kv_client()
                        .get(pred.to_vec(), Some(GetOptions::new().with_count_only()))
                        .await?;
                    if now.count() == 0 {
                        return Ok(());
                    }
                }
            }
            Some(_) => {}
        }
    }
}

/// How a wait for the predecessor ended.
enum Woken {
    /// Deleted, or the watch was cancelled, or it is time to look again anyway.
    Look,
    /// The watch failed transiently (and we napped): look again, backing off.
    Failed,
}

/// A look at the queue from our key: `(revision, the key just ahead of ours, the grant
/// record)`, read at one revision while our key is still ours.
async fn look(
    ctx: &Ctx,
    session: &Session,
    undo: &mut Undo,
    key: &[u8],
    token: i64,
    b: Bounds,
) -> std::result::Result<Snapshot, Failed> {
    let resp = retrying(ctx, Some(session), b.deadline, b.limit, true, || {
        ctx.txn(
            Txn::new().when([mine(key, token)]).and_then([
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
        Err(s @ (Stop::Deadline | Stop::Unreachable(_))) => {
            undo.finish().await;
            return Err(ctx.stop_error(s, "looking at the queue", "").into());
        }
        Err(s) => {
            return Err(ctx
                .stop_error(s, "looking at the queue", "while waiting")
                .into());
        }
    };
    if !resp.succeeded() {
        return Err(ctx.gone("while waiting", key, token).into());
    }
    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    let got = gets(&resp);
    let pred = got
        .first()
        .and_then(|kvs| kvs.first())
        .map(|kv| kv.key().to_vec());
    let held = match got.get(1).and_then(|kvs| kvs.first()) {
        Some(kv) => Some(Held::decode(&ctx.keys.name, kv.value(), kv.mod_revision())?),
        None => None,
    };
    Ok((rev, pred, held))
}

/// A look's answer: the revision read at, the key just ahead of ours (none: we are first),
/// the grant record.
type Snapshot = (i64, Option<Vec<u8>>, Option<Held>);

/// The first look, from the answer of the join that created `key` (see [`Joined::seen`]):
/// the queue's two newest keys, ours first, and the grant record, read right after the put.
/// `None` if the answer does not show our key as the newest (it always does: then the caller
/// looks as usual).
fn first_look(
    ctx: &Ctx,
    key: &[u8],
    joined: &TxnResponse,
) -> Option<std::result::Result<Snapshot, Error>> {
    let rev = joined.header().map(|h| h.revision())?;
    // Read only when the queue was not empty (the else branch of the join's grant).
    let nested = nested_answer(joined).filter(|t| !t.succeeded())?;
    let got = gets(&nested);
    let newest = got.first()?;
    if newest.first()?.key() != key {
        return None;
    }
    let pred = newest.get(1).map(|kv| kv.key().to_vec());
    let held = match got.get(1).and_then(|kvs| kvs.first()) {
        Some(kv) => match Held::decode(&ctx.keys.name, kv.value(), kv.mod_revision()) {
            Ok(h) => Some(h),
            Err(e) => return Some(Err(e)),
        },
        None => None,
    };
    Some(Ok((rev, pred, held)))
}

/// Acquires the lock: joins the queue, waits for every earlier key to go, then writes the
/// grant record.
pub(crate) async fn acquire(
    ctx: &Ctx,
    session: Arc<Session>,
    key: Vec<u8>,
    receipt: Vec<u8>,
    value: String,
    b: Bounds,
) -> std::result::Result<Grant, Failed> {
    let mut undo = Undo {
        ctx: ctx.clone(),
        session: session.clone(),
        key: key.clone(),
        receipt: receipt.clone(),
        // A join attempt may grant us the lock and write our record, answered or not: until
        // the token is known, taking the record back reads it first (its revision is ours).
        clean_records: vec![(Held::joined(&key, false), None)],
        uncertain: true,
        armed: true,
    };
    let (token, mut seen, granted) = match enqueue(ctx, &session, &key, &receipt, &value, b).await {
        Ok(j) => {
            undo.uncertain = !j.certain;
            (j.token, j.seen, j.granted)
        }
        Err((stop, certain)) => {
            let stale_lease = matches!(&stop, Stop::Lost(l) if l.cause == Cause::Gone);
            if certain {
                // Every attempt was answered and none created the key (or none was sent).
                undo.armed = false;
            } else if stale_lease {
                // etcd does not have our lease: no key of ours exists or can be created. But
                // an earlier attempt may have been applied before the lease went, and granted
                // us the lock at once: its grant record has no lease, and must be taken back
                // before the caller joins again under a new lease (which would find the record
                // and say a holder died). Waited for to the end.
                if let Some(h) = undo.start() {
                    let _ = h.await;
                }
            } else {
                undo.finish().await;
            }
            return Err(Failed {
                error: ctx.stop_error(stop, "joining the queue", "while joining the queue"),
                stale_lease,
            });
        }
    };
    // Our token is known: the join's record, taken back, says so.
    undo.clean_records = vec![(
        Held::joined(&key, false),
        Some(Held::Released { token }.encode()),
    )];
    if let Some(owner_died) = granted {
        // The queue was empty: the join granted us the lock and wrote our record (the
        // uncontended cycle's whole acquisition: one transaction).
        if owner_died {
            undo.clean_records.clear(); // a `died` record stays, whatever happens to us
        }
        // The answer may have come after our lease's local deadline (see below).
        if let Some(l) = session.lost() {
            return Err(ctx.lost_error(l, "while being granted").into());
        }
        undo.armed = false;
        return Ok(Grant {
            session,
            key: key.clone(),
            receipt,
            token,
            owner_died,
            record: Held::joined(&key, owner_died),
            uncertain: undo.uncertain,
            gone: AtomicBool::new(false),
        });
    }
    let mut backoff = Duration::from_millis(20);
    let held = loop {
        // One snapshot: is our key still ours, who is just ahead of us, what does the
        // grant record say. The first is the join's own, when it has one.
        let (rev, pred, held) = match seen.take().and_then(|j| first_look(ctx, &key, &j)) {
            Some(snapshot) => {
                // As a look's `retrying` would: a session lost meanwhile ends the wait.
                if let Some(l) = session.lost() {
                    return Err(ctx
                        .stop_error(Stop::Lost(l), "looking at the queue", "while waiting")
                        .into());
                }
                snapshot?
            }
            None => look(ctx, &session, &mut undo, &key, token, b).await?,
        };
        let Some(pred) = pred else { break held };
        if !b.waits {
            undo.finish().await;
            return Err(if b.busy_is_timeout {
                ctx.timeout()
            } else {
                Error::WouldBlock {
                    name: ctx.keys.name.clone(),
                }
            }
            .into());
        }
        let until = async {
            match b.deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        // The watch's own errors nap here, inside the race with the deadline and the lease.
        let nap = backoff;
        let watch = async {
            match deleted(ctx, &pred, rev).await {
                Ok(()) => Ok(Woken::Look),
                Err(e) if is_unavailable(&e) => {
                    tokio::time::sleep(nap).await;
                    Ok(Woken::Failed)
                }
                Err(e) => Err(e),
            }
        };
        tokio::select! {
            r = watch => match r {
                Ok(Woken::Look) => backoff = Duration::from_millis(20),
                Ok(Woken::Failed) => backoff = (backoff * 2).min(Duration::from_millis(500)),
                Err(e) => {
                    return Err(ctx
                        .stop_error(Stop::Refused(e), "watching our predecessor", "")
                        .into());
                }
            },
            l = session.until_lost() => {
                return Err(ctx.lost_error(l, "our own lease ended while we waited").into());
            }
            () = until => {
                undo.finish().await;
                return Err(ctx.timeout().into());
            }
            // A watch that sits on a member that hangs says nothing until HTTP/2 keep-alive
            // gives the connection up (seconds), or ever if the member answers pings: look
            // again every third of the TTL whatever the watch says.
            () = tokio::time::sleep(session.relook_period()) => {}
        }
    };
    // Nobody is ahead of us, and nobody can get ahead (new keys have larger revisions).
    // Whether the last holder released is in the record; a retried claim finds its own
    // record and the same verdict.
    let owner_died = held.is_some_and(|h| h.verdict_for(token));
    let record = Held::Held { token, owner_died }.encode();
    if !owner_died {
        undo.clean_records
            .push((record.clone(), Some(Held::Released { token }.encode())));
    }
    let resp = retrying(ctx, Some(&session), b.deadline, b.limit, true, || {
        ctx.txn(Txn::new().when([mine(&key, token)]).and_then([TxnOp::put(
            ctx.keys.held.clone(),
            record.as_str(),
            None,
        )]))
    })
    .await;
    let resp = match resp {
        Ok(r) => r,
        Err(s @ (Stop::Deadline | Stop::Unreachable(_))) => {
            undo.finish().await;
            return Err(ctx.stop_error(s, "writing the grant record", "").into());
        }
        Err(s) => {
            return Err(ctx
                .stop_error(s, "writing the grant record", "while being granted")
                .into());
        }
    };
    if !resp.succeeded() {
        return Err(ctx.gone("while being granted", &key, token).into());
    }
    // The answer may have come after our lease's local deadline: a guard must never be
    // handed out already lost. (The undo releases the record and the key.)
    if let Some(l) = session.lost() {
        return Err(ctx.lost_error(l, "while being granted").into());
    }
    undo.armed = false;
    Ok(Grant {
        session,
        key,
        receipt,
        token,
        owner_died,
        record,
        uncertain: undo.uncertain,
        gone: AtomicBool::new(false),
    })
}

/// Releases a grant, waiting for at most two request timeouts: `Unavailable` after that,
/// while the release goes on in its task for as long as our session lives (a release that
/// etcd never applies leaves our key to expire with the lease). See [`start_release`].
pub(crate) async fn release(ctx: &Ctx, grant: &Grant) -> Result<()> {
    let lost = grant.session.lost();
    let done = start_release(ctx, grant);
    let limit = ctx.request_timeout.saturating_mul(2);
    let outcome = tokio::time::timeout(limit, done).await;
    if let Some(l) = lost {
        // Whatever the transaction did, the lease was past its deadline here before the
        // release: the lock may have been someone else's, and we said so (or will).
        return Err(ctx.lost_holder(l, "before unlock"));
    }
    match outcome {
        Ok(Ok(r)) => r,
        Err(_) => Err(ctx.unavailable("releasing", timed_out(limit))),
        // The task was dropped unfinished: the runtime is shutting down.
        Ok(Err(_)) => Err(ctx.unavailable(
            "releasing",
            etcd_client::Error::InvalidArgs("the client's runtime is shutting down".into()),
        )),
    }
}

/// Starts releasing a grant in a task of its own (no caller can cancel it), and returns its
/// outcome's channel. One transaction: if our key and the grant record are still ours,
/// delete the key and write `released TOKEN` both as the grant record and as our receipt;
/// otherwise read the record and the receipt, and delete our key if it is still there (a
/// record that is not ours, garbage included, must not leave our key in everyone's way).
///
/// A retry after a lost answer finds our receipt saying `released TOKEN`: the release went
/// through, whoever holds the lock now (the next holder's record has replaced ours by then).
/// Once the outcome is known the receipt is no longer needed, unless a join attempt of ours
/// may still be applied late (it fences that off): it is deleted with the next join.
pub(crate) fn start_release(ctx: &Ctx, grant: &Grant) -> oneshot::Receiver<Result<()>> {
    let (tx, rx) = oneshot::channel();
    let (ctx, session) = (ctx.clone(), grant.session.clone());
    let (key, receipt, token) = (grant.key.clone(), grant.receipt.clone(), grant.token);
    let (record, uncertain) = (grant.record.clone(), grant.uncertain);
    grant.session.clone().spawn_on_runtime(async move {
        let released = Held::Released { token }.encode();
        let r = persist(&ctx, &session, || {
            ctx.txn(
                Txn::new()
                    .when([
                        mine(&key, token),
                        Compare::value(ctx.keys.held.clone(), CompareOp::Equal, record.as_str()),
                    ])
                    .and_then([
                        TxnOp::delete(key.clone(), None),
                        TxnOp::put(ctx.keys.held.clone(), released.as_str(), None),
                        TxnOp::put(receipt.clone(), released.as_str(), leased(&session)),
                    ])
                    .or_else([
                        TxnOp::get(ctx.keys.held.clone(), None),
                        TxnOp::get(receipt.clone(), None),
                        // Our key there means our lease is there too, for the receipt.
                        TxnOp::txn(Txn::new().when([mine(&key, token)]).and_then([
                            TxnOp::delete(key.clone(), None),
                            TxnOp::put(receipt.clone(), "withdrawn", leased(&session)),
                        ])),
                    ]),
            )
        })
        .await;
        let outcome = match r {
            Ok(resp) if resp.succeeded() => Ok(()),
            Ok(resp) => {
                let got = gets(&resp);
                let first = |i: usize| got.get(i).and_then(|kvs| kvs.first());
                if first(1).is_some_and(|kv| kv.value() == released.as_bytes()) {
                    Ok(())
                } else if let Some(Err(e)) =
                    first(0).map(|kv| Held::decode(&ctx.keys.name, kv.value(), kv.mod_revision()))
                {
                    Err(e)
                } else {
                    Err(ctx.gone("at unlock", &key, token))
                }
            }
            Err(GaveUp::Refused(e)) => {
                session.abandon(format!(
                    "etcd refused our release ({e}); the lease must expire"
                ));
                Err(Error::Etcd {
                    name: ctx.keys.name.clone(),
                    op: "releasing",
                    source: e,
                })
            }
            Err(GaveUp::SessionOver(e)) => Err(ctx.unavailable("releasing", e)),
        };
        if !uncertain {
            session.stale(receipt);
        }
        let _ = tx.send(outcome);
    });
    rx
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
    let resp = retrying(ctx, Some(&grant.session), None, None, true, || {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Waker};

    /// A request goes out on the first poll of its attempt, not a timer tick later: a timer
    /// due "now" fires only at the timer wheel's next millisecond, which added about a
    /// millisecond to every request (half of a one-client lock cycle's time).
    #[tokio::test]
    async fn an_attempt_sends_its_first_copy_at_once() {
        for hedged in [false, true] {
            let calls = AtomicUsize::new(0);
            let mut f = || {
                calls.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<std::result::Result<(), etcd_client::Error>>()
            };
            let attempt = race(&mut f, Duration::from_secs(5), hedged);
            tokio::pin!(attempt);
            let mut cx = Context::from_waker(Waker::noop());
            assert!(attempt.as_mut().poll(&mut cx).is_pending());
            assert_eq!(calls.load(Ordering::SeqCst), 1, "hedged: {hedged}");
        }
    }
}
