//! Lock names and the etcd keys of one lock.
//!
//! A lock `NAME` owns every key under `fairlock/NAME/`:
//!
//! - `fairlock/NAME/q/LEASE-SEQ`: one per queued or holding client, attached to its lease
//!   (so it disappears when the client's lease expires). Its create revision is its place in
//!   line and, once granted, the fencing token. Its value says who it is (`pid=… host=…
//!   since=…`), for `fairlock status`.
//! - `fairlock/NAME/held`: no lease; the grant record (see [`Held`]).
//! - `fairlock/NAME/r/LEASE-SEQ`: the *receipt* of the acquisition whose queue key is
//!   `q/LEASE-SEQ`, attached to the same lease: `released TOKEN` written by its release,
//!   `withdrawn` by a withdraw that had to fence off a late join. A release retried after a
//!   lost answer finds it (and knows it went through); a join attempt applied late finds it
//!   (and creates nothing). Deleted once no retry or late join can need it, or with the lease.

use crate::error::{Error, Result};

/// The longest lock name, in bytes.
pub const MAX_NAME: usize = 255;

/// The keys of one lock.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub name: String,
    /// `fairlock/NAME/q/`: the queue's prefix.
    pub queue: Vec<u8>,
    /// `fairlock/NAME/held`: the grant record.
    pub held: Vec<u8>,
    /// `fairlock/NAME/r/`: the receipts' prefix.
    pub receipts: Vec<u8>,
}

impl Keys {
    pub fn new(name: &str) -> Result<Keys> {
        validate(name)?;
        Ok(Keys {
            name: name.to_owned(),
            queue: format!("fairlock/{name}/q/").into_bytes(),
            held: format!("fairlock/{name}/held").into_bytes(),
            receipts: format!("fairlock/{name}/r/").into_bytes(),
        })
    }

    /// The queue key of the `seq`th acquisition under lease `lease`.
    pub fn entry(&self, lease: i64, seq: u64) -> Vec<u8> {
        let mut k = self.queue.clone();
        k.extend_from_slice(format!("{lease:016x}-{seq}").as_bytes());
        k
    }

    /// The receipt of the `seq`th acquisition under lease `lease`.
    pub fn receipt(&self, lease: i64, seq: u64) -> Vec<u8> {
        let mut k = self.receipts.clone();
        k.extend_from_slice(format!("{lease:016x}-{seq}").as_bytes());
        k
    }
}

/// Checks a lock name: 1 to 255 bytes of UTF-8 with no `/` (names must not nest: the queue of
/// `a` must not contain the keys of `a/q`) and no control characters (they would garble
/// `fairlock status` and logs).
pub fn validate(name: &str) -> Result<()> {
    let bad = |what| Error::InvalidName {
        name: name.escape_debug().to_string(),
        what,
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("longer than 255 bytes"));
    }
    if name.contains('/') {
        return Err(bad("contains '/'"));
    }
    if name.chars().any(char::is_control) {
        return Err(bad("contains a control character"));
    }
    Ok(())
}

/// The grant record `fairlock/NAME/held`: written by each client as it is granted the lock
/// (in the transaction that checks its queue key still exists, or in its join when that
/// finds the queue empty) and by each holder as it releases it (in the transaction that
/// deletes its key). A holder whose lease expired never writes `released`, which is how the
/// next holder learns that its predecessor died.
///
/// Its forms:
/// - `held TOKEN clean|died`: granted to the entry of create revision TOKEN; whether the
///   holder before it had released (kept so that a retried grant finds its first verdict).
/// - `held @ENTRY clean|died`: the same, written by the join of queue entry `q/ENTRY`, which
///   found the queue empty: its token (the entry's create revision, the join's own
///   revision) is not known when the join is sent; it is the record's own mod revision. The
///   entry's name makes the record unique to that acquisition.
/// - `released TOKEN`: the holder of TOKEN released it (or an acquisition granted as TOKEN
///   that gave up before its caller got the guard took its clean record back: an acquisition
///   that never learnt its token reads it from its `held @ENTRY clean` record first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// `held TOKEN|@ENTRY clean|died`.
    Held { token: i64, owner_died: bool },
    /// `released TOKEN`.
    Released { token: i64 },
}

impl Held {
    pub fn encode(self) -> String {
        match self {
            Held::Held { token, owner_died } => {
                format!("held {token} {}", if owner_died { "died" } else { "clean" })
            }
            Held::Released { token } => format!("released {token}"),
        }
    }

    /// `held @ENTRY clean|died`, the record the join of queue entry `key` writes (see
    /// [`Held`]).
    pub fn joined(key: &[u8], owner_died: bool) -> String {
        format!(
            "held @{} {}",
            entry_of(key),
            if owner_died { "died" } else { "clean" }
        )
    }

    /// The record `v`, whose mod revision is `mod_revision`.
    pub fn decode(name: &str, v: &[u8], mod_revision: i64) -> Result<Held> {
        let corrupt = || Error::Corrupt {
            name: name.to_owned(),
            what: format!(
                "fairlock/{name}/held is {:?}, not \"held N|@ENTRY clean|died\" or \"released N\"",
                String::from_utf8_lossy(v)
            ),
        };
        let s = std::str::from_utf8(v).map_err(|_| corrupt())?;
        let token = |t: &str| t.parse::<i64>().map_err(|_| corrupt());
        // A token, or `@ENTRY` (a join's own record: its token is the record's revision).
        let held_by = |t: &str| match t.strip_prefix('@') {
            Some(entry) if !entry.is_empty() => Ok(mod_revision),
            Some(_) => Err(corrupt()),
            None => token(t),
        };
        let mut w = s.split(' ');
        let held = match (w.next(), w.next(), w.next(), w.next()) {
            (Some("held"), Some(t), Some(v), None) => Held::Held {
                token: held_by(t)?,
                owner_died: match v {
                    "clean" => false,
                    "died" => true,
                    _ => return Err(corrupt()),
                },
            },
            (Some("released"), Some(t), None, None) => Held::Released { token: token(t)? },
            _ => return Err(corrupt()),
        };
        Ok(held)
    }

    /// Whether a client granted as `me`, finding this record, takes over from a holder that
    /// never released.
    pub fn verdict_for(self, me: i64) -> bool {
        match self {
            Held::Released { .. } => false,
            Held::Held { token, owner_died } if token == me => owner_died,
            Held::Held { .. } => true,
        }
    }
}

/// The `LEASE-SEQ` part of queue key `key` (what follows its last `/`).
fn entry_of(key: &[u8]) -> String {
    let k = String::from_utf8_lossy(key);
    k.rsplit('/').next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate("jobs").is_ok());
        assert!(validate("user-123.eu_west").is_ok());
        assert!(validate(&"x".repeat(255)).is_ok());
        for (bad, why) in [
            ("", "empty"),
            ("a/b", "contains '/'"),
            ("a\nb", "contains a control character"),
            ("a\u{7f}", "contains a control character"),
        ] {
            match validate(bad) {
                Err(Error::InvalidName { what, .. }) => assert_eq!(what, why, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(validate(&"x".repeat(256)).is_err());
        let e = validate("a\tb").unwrap_err().to_string();
        assert_eq!(e, "lock name \"a\\tb\": contains a control character");
    }

    #[test]
    fn keys() {
        let k = Keys::new("jobs").unwrap();
        assert_eq!(k.queue, b"fairlock/jobs/q/");
        assert_eq!(k.held, b"fairlock/jobs/held");
        assert_eq!(k.entry(0x1f, 3), b"fairlock/jobs/q/000000000000001f-3");
        assert_eq!(k.receipt(0x1f, 3), b"fairlock/jobs/r/000000000000001f-3");
    }

    #[test]
    fn held_records() {
        for h in [
            Held::Held {
                token: 7,
                owner_died: true,
            },
            Held::Held {
                token: 8,
                owner_died: false,
            },
            Held::Released { token: 9 },
        ] {
            assert_eq!(Held::decode("n", h.encode().as_bytes(), 99).unwrap(), h);
        }
        // A join's own record: its token is the record's revision.
        let key = b"fairlock/n/q/00000000000000ab-3";
        assert_eq!(Held::joined(key, true), "held @00000000000000ab-3 died");
        assert_eq!(
            Held::decode("n", Held::joined(key, false).as_bytes(), 42).unwrap(),
            Held::Held {
                token: 42,
                owner_died: false
            }
        );

        for bad in [
            "",
            "held",
            "held 1",
            "held x clean",
            "held 1 maybe",
            "released",
            "gone 1",
            "held 1 clean x",
            "held @ clean",
            "released @00000000000000ab-3",
        ] {
            assert!(Held::decode("n", bad.as_bytes(), 99).is_err(), "{bad:?}");
        }
        assert!(!Held::Released { token: 3 }.verdict_for(5));
        assert!(
            Held::Held {
                token: 3,
                owner_died: false
            }
            .verdict_for(5)
        );
        assert!(
            !Held::Held {
                token: 5,
                owner_died: false
            }
            .verdict_for(5)
        );
        assert!(
            Held::Held {
                token: 5,
                owner_died: true
            }
            .verdict_for(5)
        );
    }
}
