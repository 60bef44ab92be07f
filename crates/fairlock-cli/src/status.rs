//! `fairlock status LOCKFILE`: a read-only snapshot of a lock file (of one name of it, with
//! `--name`), for the printer in `status_print.rs`. (`etcd://` is in `etcd.rs`.)

use fairlock::{LockKind, Status, TicketInfo};

use crate::args::StatusArgs;
use crate::exit::{self, Failure};
use crate::status_print::{self, Lock, On, Party, Place, Shown};

pub fn main(a: &StatusArgs) -> Result<u8, Failure> {
    let path = a.lockfile.as_path();
    let mut st = fairlock::inspect(path).map_err(|e| Failure::open(path, &e))?;
    if let Some(name) = &a.name {
        if st.kind != LockKind::Names {
            return Err(Failure::new(
                exit::DATA,
                format!(
                    "{}: holds one lock without names (--name is for a file of named locks)",
                    path.display()
                ),
            ));
        }
        st.names.retain(|n| n.name.as_ref() == Some(name));
        if st.names.is_empty() {
            return Err(Failure::new(
                exit::NO_INPUT,
                format!(
                    "{}: no lock named {name:?} (in use, or kept for reuse)",
                    path.display()
                ),
            ));
        }
    }
    let shown = if st.kind == LockKind::Names {
        Shown::Names {
            path: st.path.clone(),
            names: st.names.iter().map(lock).collect(),
        }
    } else {
        Shown::One(lock(&st))
    };
    status_print::print(&shown, a.json);
    Ok(0)
}

/// One lock of the file (the file's, or a name's).
fn lock(st: &Status) -> Lock {
    Lock {
        place: Place::File(st.path.clone()),
        name: st.name.clone(),
        kind: st.kind,
        bypass_bound: st.fairness.bypass_bound(),
        holders: st.holders.iter().map(party).collect(),
        waiters: st.waiters.iter().map(party).collect(),
        arriving: st.arriving,
        token: st.token(),
        next_ticket: Some(st.next_ticket),
        etcd: None,
    }
}

fn party(t: &TicketInfo) -> Party {
    Party {
        ticket: Some(t.ticket),
        token: t.token,
        state: Some(t.state),
        pid: t.pid,
        alive: t.alive,
        elapsed: t.elapsed,
        owner_died: t.owner_died,
        shared: t.shared,
        on: On::File {
            tid: t.tid,
            lease_remaining: t.lease_remaining,
        },
    }
}
