//! `fairlock status LOCKFILE`: a read-only snapshot of a lock file, as text or JSON.
//! (`etcd://` is in `etcd.rs`.)

use std::fmt::Write as _;
use std::time::Duration;

use fairlock::{LockKind, Status, TicketInfo};

use crate::args::StatusArgs;
use crate::exit::{self, Failure};
use crate::secs::human;
use crate::stdout;

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
    stdout::write(&if a.json { json(&st) } else { text(&st) });
    Ok(0)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

/// How a ticket of a lock of kind `k` holds or asks, appended to its line: "", ", read",
/// ", write", ", permit". (At the end, so that lines still start as scripts expect.)
fn role(k: LockKind, t: &TicketInfo) -> &'static str {
    match k {
        LockKind::RwLock if t.shared => ", read",
        LockKind::RwLock => ", write",
        LockKind::Semaphore { .. } => ", permit",
        _ => "",
    }
}

fn text(st: &Status) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "lock file:      {}", st.path.display());
    if st.kind == LockKind::Names {
        let held = st.names.iter().filter(|n| n.holder.is_some()).count();
        let _ = writeln!(
            s,
            "kind:           named locks ({} names, {held} held)",
            st.names.len()
        );
        for n in &st.names {
            let _ = writeln!(s, "\nname:           {}", n.name.as_deref().unwrap_or(""));
            s.push_str(&lock_text(n));
        }
        return s;
    }
    s.push_str(&lock_text(st));
    s
}

/// The lines of one lock (of a file of one lock, or a name's).
fn lock_text(st: &Status) -> String {
    let mut s = String::new();
    match st.kind {
        LockKind::RwLock => s.push_str("kind:           reader/writer lock\n"),
        LockKind::Semaphore { permits } => {
            let _ = writeln!(
                s,
                "kind:           semaphore of {permits} permits ({} held)",
                st.holders.len()
            );
        }
        _ => {}
    }
    if let Some(k) = st.fairness.bypass_bound() {
        let _ = writeln!(
            s,
            "fairness:       bounded: a waiter may be overtaken up to {k} times"
        );
    }
    if st.holders.is_empty() {
        s.push_str("holder:         none (free)\n");
    }
    for h in &st.holders {
        holder_text(&mut s, st.kind, h);
    }
    let _ = writeln!(s, "tickets issued: {}", st.next_ticket);
    let _ = writeln!(
        s,
        "token:          {}{}",
        st.token(),
        if st.holder.is_some() {
            ""
        } else {
            " (the next grant's, at least)"
        }
    );
    let _ = write!(s, "waiters:        {}", st.waiters.len());
    if st.arriving > 0 {
        let _ = write!(s, " (+{} arriving)", st.arriving);
    }
    s.push('\n');
    for (i, w) in st.waiters.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {:>3}. ticket {:<6} pid {:<8} thread {:<8} waiting {} ({}{}){}",
            i + 1,
            w.ticket,
            opt(w.pid),
            opt(w.tid),
            w.elapsed.map_or_else(|| "?".into(), human),
            w.state,
            role(st.kind, w),
            if w.alive == Some(false) {
                ", DEAD: will be passed over"
            } else {
                ""
            }
        );
    }
    s
}

fn holder_text(s: &mut String, kind: LockKind, h: &TicketInfo) {
    let _ = write!(
        s,
        "holder:         pid {}, thread {}, held for {}, token {}",
        opt(h.pid),
        opt(h.tid),
        h.elapsed.map_or_else(|| "?".into(), human),
        h.token
    );
    match h.lease_remaining {
        Some(d) if d.is_zero() => s.push_str(", lease expired (may be taken over)"),
        Some(d) => {
            let _ = write!(s, ", lease left {}", human(d));
        }
        None => s.push_str(", no lease"),
    }
    s.push_str(role(kind, h));
    if h.state != "held" {
        let _ = write!(s, " ({})", h.state);
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

fn holder(h: &TicketInfo) -> String {
    format!(
        "{{\"ticket\":{},\"token\":{},\"state\":{},\"pid\":{},\"tid\":{},\"alive\":{},\"held_ms\":{},\"lease_remaining_ms\":{},\"owner_died\":{},\"shared\":{}}}",
        h.ticket,
        h.token,
        string(h.state),
        num(h.pid),
        num(h.tid),
        num(h.alive),
        ms(h.elapsed),
        ms(h.lease_remaining),
        h.owner_died,
        h.shared
    )
}

fn waiter(w: &TicketInfo) -> String {
    format!(
        "{{\"ticket\":{},\"token\":{},\"state\":{},\"pid\":{},\"tid\":{},\"alive\":{},\"waited_ms\":{},\"shared\":{}}}",
        w.ticket,
        w.token,
        string(w.state),
        num(w.pid),
        num(w.tid),
        num(w.alive),
        ms(w.elapsed),
        w.shared
    )
}

fn json(st: &Status) -> String {
    if st.kind == LockKind::Names {
        let names: Vec<String> = st.names.iter().map(lock_json).collect();
        return format!(
            "{{\"path\":{},\"kind\":\"names\",\"names\":[{}]}}\n",
            string(&st.path.to_string_lossy()),
            names.join(",")
        );
    }
    let mut j = lock_json(st);
    j.push('\n');
    j
}

/// One lock's JSON object (a name's has a "name" member first).
fn lock_json(st: &Status) -> String {
    let name = st
        .name
        .as_ref()
        .map_or_else(String::new, |n| format!("\"name\":{},", string(n)));
    let h = st.holder.as_ref();
    let queue: Vec<String> = st.waiters.iter().map(waiter).collect();
    let holders: Vec<String> = st.holders.iter().map(holder).collect();
    let permits = match st.kind {
        LockKind::Semaphore { permits } => Some(permits),
        _ => None,
    };
    format!(
        "{{{name}\"path\":{},\"kind\":{},\"permits\":{},\"bypass_bound\":{},\"held\":{},\"owner_pid\":{},\"owner_tid\":{},\"token\":{},\"next_ticket\":{},\"waiters\":{},\"arriving\":{},\"lease_remaining_ms\":{},\"holder\":{},\"holders\":[{}],\"queue\":[{}]}}",
        string(&st.path.to_string_lossy()),
        string(st.kind.name()),
        num(permits),
        num(st.fairness.bypass_bound()),
        h.is_some(),
        num(h.and_then(|h| h.pid)),
        num(h.and_then(|h| h.tid)),
        st.token(),
        st.next_ticket,
        st.waiters.len(),
        st.arriving,
        ms(h.and_then(|h| h.lease_remaining)),
        h.map_or_else(|| "null".to_string(), holder),
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
