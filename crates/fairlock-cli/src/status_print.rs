//! What `fairlock status` prints, for a lock file and for an etcd lock alike: each backend
//! describes its lock as a [`Shown`], printed here as text or as one line of JSON. A fact one
//! backend does not have is `?` in the text and `null` in the JSON; the few facts only etcd
//! has (an entry's host, lease and record, the last token, the revision read at) are added
//! after the common ones.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use fairlock::LockKind;

use crate::secs::human;
use crate::stdout;

/// What `fairlock status` shows: one lock, or a file of named locks.
pub enum Shown {
    One(Lock),
    /// A file of named locks: its path and each name's lock (only the one asked for, with
    /// `--name`).
    Names {
        path: PathBuf,
        names: Vec<Lock>,
    },
}

/// Where a lock is.
pub enum Place {
    /// A lock file (or a name in it).
    File(PathBuf),
    /// A lock on etcd, by its etcd:// address.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Etcd(String),
}

/// One lock's state.
pub struct Lock {
    pub place: Place,
    /// A named lock's name: a name in a file of named locks, or an etcd lock's name.
    pub name: Option<String>,
    pub kind: LockKind,
    /// An exclusive lock's bypass bound (`Fairness::Bounded`); `None` for strict FIFO.
    pub bypass_bound: Option<u32>,
    /// Every holder, in grant order (one for an exclusive lock).
    pub holders: Vec<Party>,
    /// The waiters, in line.
    pub waiters: Vec<Party>,
    /// Tickets taken by processes that have not registered yet.
    pub arriving: u64,
    /// The holder's fencing token, or when the lock is free the smallest one the next grant
    /// can carry.
    pub token: u64,
    /// Tickets issued so far (a lock file's).
    pub next_ticket: Option<u64>,
    /// An etcd lock's facts of its own.
    pub etcd: Option<EtcdFacts>,
}

/// What only an etcd lock has.
pub struct EtcdFacts {
    /// The last grant's token, whether or not its holder is still there (0: never granted).
    pub last_token: u64,
    /// The etcd revision the state was read at.
    pub revision: i64,
}

/// A holder or a waiter.
pub struct Party {
    /// Its ticket (a lock file's; etcd has none).
    pub ticket: Option<u64>,
    /// The fencing token its grant carries (etcd: its key's create revision).
    pub token: u64,
    /// Its state (`held`, `granted`, `ready`, `waiting`, `sleeping`), when known.
    pub state: Option<&'static str>,
    pub pid: Option<u32>,
    /// Whether its process is alive, when known; `Some(false)`: the next acquire passes it
    /// over.
    pub alive: Option<bool>,
    /// How long it has held or waited, when known.
    pub elapsed: Option<Duration>,
    /// It took over from a holder that died or was taken over.
    pub owner_died: bool,
    /// A reader or a permit (false for writers and exclusive locks).
    pub shared: bool,
    pub on: On,
}

/// What a party is to its backend.
pub enum On {
    /// A thread of a process on this host.
    File {
        tid: Option<u32>,
        /// A holder's lease: how long until it may be taken over (zero if overdue); `None`
        /// without a lease.
        lease_remaining: Option<Duration>,
    },
    /// A client of etcd.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Etcd {
        /// The host it runs on, as it wrote it.
        host: Option<String>,
        /// Its lease's id.
        lease: i64,
        /// What it wrote about itself (`pid=… host=… since=UNIX_MS`).
        owner: String,
    },
}

impl Party {
    fn tid(&self) -> Option<u32> {
        match self.on {
            On::File { tid, .. } => tid,
            On::Etcd { .. } => None,
        }
    }

    fn lease_remaining(&self) -> Option<Duration> {
        match self.on {
            On::File {
                lease_remaining, ..
            } => lease_remaining,
            On::Etcd { .. } => None,
        }
    }
}

/// Prints `shown` on stdout, as text or as JSON.
pub fn print(shown: &Shown, json: bool) {
    stdout::write(&if json { json_of(shown) } else { text_of(shown) });
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

fn elapsed(d: Option<Duration>) -> String {
    d.map_or_else(|| "?".into(), human)
}

/// How a party of a lock of kind `k` holds or asks, appended to its line: "", ", read",
/// ", write", ", permit". (At the end, so that lines still start as scripts expect.)
fn role(k: LockKind, p: &Party) -> &'static str {
    match k {
        LockKind::RwLock if p.shared => ", read",
        LockKind::RwLock => ", write",
        LockKind::Semaphore { .. } => ", permit",
        _ => "",
    }
}

fn text_of(shown: &Shown) -> String {
    let mut s = String::new();
    match shown {
        Shown::One(lock) => {
            match &lock.place {
                Place::File(path) => {
                    let _ = writeln!(s, "lock file:      {}", path.display());
                }
                Place::Etcd(address) => {
                    let _ = writeln!(s, "lock:           {address}");
                }
            }
            s.push_str(&lock_text(lock));
        }
        Shown::Names { path, names } => {
            let _ = writeln!(s, "lock file:      {}", path.display());
            let held = names.iter().filter(|n| !n.holders.is_empty()).count();
            let _ = writeln!(
                s,
                "kind:           named locks ({} names, {held} held)",
                names.len()
            );
            for n in names {
                let _ = writeln!(s, "\nname:           {}", n.name.as_deref().unwrap_or(""));
                s.push_str(&lock_text(n));
            }
        }
    }
    s
}

/// The lines of one lock (after the line saying where it is, or a name's line).
fn lock_text(lock: &Lock) -> String {
    let mut s = String::new();
    match lock.kind {
        LockKind::RwLock => s.push_str("kind:           reader/writer lock\n"),
        LockKind::Semaphore { permits } => {
            let _ = writeln!(
                s,
                "kind:           semaphore of {permits} permits ({} held)",
                lock.holders.len()
            );
        }
        _ => {}
    }
    if let Some(k) = lock.bypass_bound {
        let _ = writeln!(
            s,
            "fairness:       bounded: a waiter may be overtaken up to {k} times"
        );
    }
    if lock.holders.is_empty() {
        s.push_str("holder:         none (free)\n");
    }
    for h in &lock.holders {
        holder_text(&mut s, lock.kind, h);
    }
    if let Some(n) = lock.next_ticket {
        let _ = writeln!(s, "tickets issued: {n}");
    }
    let _ = writeln!(
        s,
        "token:          {}{}",
        lock.token,
        if lock.holders.is_empty() {
            " (the next grant's, at least)"
        } else {
            ""
        }
    );
    let _ = write!(s, "waiters:        {}", lock.waiters.len());
    if lock.arriving > 0 {
        let _ = write!(s, " (+{} arriving)", lock.arriving);
    }
    s.push('\n');
    for (i, w) in lock.waiters.iter().enumerate() {
        waiter_text(&mut s, lock.kind, i + 1, w);
    }
    if let Some(e) = &lock.etcd {
        let _ = writeln!(s, "last token:     {}", e.last_token);
        let _ = writeln!(s, "etcd revision:  {}", e.revision);
    }
    s
}

fn holder_text(s: &mut String, kind: LockKind, h: &Party) {
    let _ = write!(s, "holder:         pid {}", opt(h.pid));
    match &h.on {
        On::File { tid, .. } => {
            let _ = write!(s, ", thread {}, held for {}", opt(*tid), elapsed(h.elapsed));
        }
        On::Etcd { host, .. } => {
            let _ = write!(s, ", host {}", opt(host.as_deref()));
            if let Some(d) = h.elapsed {
                let _ = write!(s, ", held for {}", human(d));
            }
        }
    }
    let _ = write!(s, ", token {}", h.token);
    match &h.on {
        On::File {
            lease_remaining, ..
        } => match lease_remaining {
            Some(d) if d.is_zero() => s.push_str(", lease expired (may be taken over)"),
            Some(d) => {
                let _ = write!(s, ", lease left {}", human(*d));
            }
            None => s.push_str(", no lease"),
        },
        On::Etcd { lease, .. } => {
            let _ = write!(s, ", lease {lease:x}");
        }
    }
    s.push_str(role(kind, h));
    if let Some(state) = h.state.filter(|&st| st != "held") {
        let _ = write!(s, " ({state})");
    }
    s.push('\n');
    if h.alive == Some(false) {
        s.push_str(
            "                DEAD: its process is gone; the next acquire of any kind (fairlock run,\n                -n and -w included) revokes it and tells its holder that the owner died\n",
        );
    }
    if h.owner_died {
        s.push_str("                the previous holder died or was taken over\n");
    }
}

fn waiter_text(s: &mut String, kind: LockKind, place: usize, w: &Party) {
    let _ = write!(s, "  {place:>3}. ");
    match w.ticket {
        Some(t) => {
            let _ = write!(s, "ticket {t:<6} ");
        }
        None => {
            let _ = write!(s, "token {:<6} ", w.token);
        }
    }
    let _ = write!(s, "pid {:<8} ", opt(w.pid));
    match &w.on {
        On::File { tid, .. } => {
            let _ = write!(s, "thread {:<8} ", opt(*tid));
        }
        On::Etcd { host, .. } => {
            let _ = write!(s, "host {:<8} ", opt(host.as_deref()));
        }
    }
    let _ = write!(s, "waiting {}", elapsed(w.elapsed));
    if let Some(state) = w.state {
        let _ = write!(s, " ({state}{})", role(kind, w));
    }
    if let On::Etcd { lease, .. } = &w.on {
        let _ = write!(s, ", lease {lease:x}");
    }
    if w.alive == Some(false) {
        s.push_str(", DEAD: will be passed over");
    }
    s.push('\n');
}

fn num<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "null".to_string(), |v| v.to_string())
}

fn ms(d: Option<Duration>) -> String {
    num(d.map(|d| d.as_millis()))
}

/// A JSON string literal.
fn string(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// The members only an etcd entry has (each after a comma), or nothing.
fn etcd_members(p: &Party) -> String {
    match &p.on {
        On::File { .. } => String::new(),
        On::Etcd { host, lease, owner } => format!(
            ",\"host\":{},\"lease\":{lease},\"owner\":{}",
            host.as_deref().map_or_else(|| "null".to_string(), string),
            string(owner)
        ),
    }
}

fn holder_json(h: &Party) -> String {
    format!(
        "{{\"ticket\":{},\"token\":{},\"state\":{},\"pid\":{},\"tid\":{},\"alive\":{},\"held_ms\":{},\"lease_remaining_ms\":{},\"owner_died\":{},\"shared\":{}{}}}",
        num(h.ticket),
        h.token,
        h.state.map_or_else(|| "null".to_string(), string),
        num(h.pid),
        num(h.tid()),
        num(h.alive),
        ms(h.elapsed),
        ms(h.lease_remaining()),
        h.owner_died,
        h.shared,
        etcd_members(h)
    )
}

fn waiter_json(w: &Party) -> String {
    format!(
        "{{\"ticket\":{},\"token\":{},\"state\":{},\"pid\":{},\"tid\":{},\"alive\":{},\"waited_ms\":{},\"shared\":{}{}}}",
        num(w.ticket),
        w.token,
        w.state.map_or_else(|| "null".to_string(), string),
        num(w.pid),
        num(w.tid()),
        num(w.alive),
        ms(w.elapsed),
        w.shared,
        etcd_members(w)
    )
}

fn json_of(shown: &Shown) -> String {
    match shown {
        Shown::One(lock) => {
            let mut j = lock_json(lock);
            j.push('\n');
            j
        }
        Shown::Names { path, names } => {
            let names: Vec<String> = names.iter().map(lock_json).collect();
            format!(
                "{{\"path\":{},\"kind\":\"names\",\"names\":[{}]}}\n",
                string(&path.to_string_lossy()),
                names.join(",")
            )
        }
    }
}

/// One lock's JSON object (a named lock's has a "name" member first).
fn lock_json(lock: &Lock) -> String {
    let name = lock
        .name
        .as_ref()
        .map_or_else(String::new, |n| format!("\"name\":{},", string(n)));
    let place = match &lock.place {
        Place::File(path) => format!("\"path\":{}", string(&path.to_string_lossy())),
        Place::Etcd(address) => format!("\"address\":{}", string(address)),
    };
    let h = lock.holders.first();
    let queue: Vec<String> = lock.waiters.iter().map(waiter_json).collect();
    let holders: Vec<String> = lock.holders.iter().map(holder_json).collect();
    let permits = match lock.kind {
        LockKind::Semaphore { permits } => Some(permits),
        _ => None,
    };
    let etcd = lock.etcd.as_ref().map_or_else(String::new, |e| {
        format!(
            ",\"last_token\":{},\"revision\":{}",
            e.last_token, e.revision
        )
    });
    format!(
        "{{{name}{place},\"kind\":{},\"permits\":{},\"bypass_bound\":{},\"held\":{},\"owner_pid\":{},\"owner_tid\":{},\"token\":{},\"next_ticket\":{},\"waiters\":{},\"arriving\":{},\"lease_remaining_ms\":{},\"holder\":{},\"holders\":[{}],\"queue\":[{}]{etcd}}}",
        string(lock.kind.name()),
        num(permits),
        num(lock.bypass_bound),
        h.is_some(),
        num(h.and_then(|h| h.pid)),
        num(h.and_then(Party::tid)),
        lock.token,
        num(lock.next_ticket),
        lock.waiters.len(),
        lock.arriving,
        ms(h.and_then(Party::lease_remaining)),
        h.map_or_else(|| "null".to_string(), holder_json),
        holders.join(","),
        queue.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::string;

    #[test]
    fn escapes_json_strings() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
