//! [`Status`]: who holds a lock and who waits, read from etcd in one snapshot.

use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use crate::error::{Error, Result};
use crate::keys::Held;
use crate::queue::Ctx;

/// One client in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The create revision of its key: its place in line, and its token once granted.
    pub token: u64,
    /// Its lease's id.
    pub lease: i64,
    /// What it wrote about itself: `pid=… host=… since=UNIX_MS`.
    pub owner: String,
}

/// A lock's state in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// The lock's name.
    pub name: String,
    /// The etcd revision this was read at.
    pub revision: i64,
    /// The holder: the first in line, once it has written its grant record.
    pub holder: Option<Entry>,
    /// Whether the holder took over from one whose lease expired.
    pub holder_owner_died: bool,
    /// Everyone else in line, in order (the first may be being granted right now).
    pub waiters: Vec<Entry>,
    /// The last grant's token, whether or not its holder is still there (0: never granted).
    pub last_token: u64,
}

pub(crate) async fn read(ctx: &Ctx) -> Result<Status> {
    let txn = Txn::new().and_then([
        TxnOp::get(
            ctx.keys.queue.clone(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        ),
        TxnOp::get(ctx.keys.held.clone(), None),
    ]);
    let resp = tokio::time::timeout(ctx.request_timeout, ctx.client.kv_client().txn(txn))
        .await
        .map_err(|_| crate::session::timed_out(ctx.request_timeout))
        .and_then(|r| r)
        .map_err(|e| {
            if crate::error::is_unavailable(&e) {
                Error::Unavailable {
                    endpoints: ctx.endpoints.clone(),
                    op: "reading the lock's state",
                    source: e,
                }
            } else {
                Error::Etcd {
                    name: ctx.keys.name.clone(),
                    op: "reading the lock's state",
                    source: e,
                }
            }
        })?;
    let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        etcd_client::TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
        _ => None,
    });
    let queue = gets.next().unwrap_or_default();
    let held = match gets.next().unwrap_or_default().first() {
        Some(kv) => Some(Held::decode(&ctx.keys.name, kv.value(), kv.mod_revision())?),
        None => None,
    };
    let mut entries: Vec<Entry> = queue
        .iter()
        .map(|kv| Entry {
            token: u64::try_from(kv.create_revision()).unwrap_or(0),
            lease: kv.lease(),
            owner: String::from_utf8_lossy(kv.value()).into_owned(),
        })
        .collect();
    let (last_token, granted) = match held {
        Some(Held::Held { token, owner_died }) => (token, Some((token, owner_died))),
        Some(Held::Released { token }) => (token, None),
        None => (0, None),
    };
    let mut status = Status {
        name: ctx.keys.name.clone(),
        revision,
        holder: None,
        holder_owner_died: false,
        waiters: Vec::new(),
        last_token: u64::try_from(last_token).unwrap_or(0),
    };
    if let (Some((token, died)), Some(first)) = (granted, entries.first())
        && i64::try_from(first.token).ok() == Some(token)
    {
        status.holder = Some(entries.remove(0));
        status.holder_owner_died = died;
    }
    status.waiters = entries;
    Ok(status)
}
