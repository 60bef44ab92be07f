//! `fairlock run etcd://…` and `fairlock status etcd://…`: the same habits on a lock held in
//! etcd (crate `fairlock-etcd`; built with the feature `etcd`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use fairlock::LockKind;
use fairlock_etcd::{Address, Entry, Error, EtcdGuard, EtcdLock, Status};

use crate::args::{RunArgs, StatusArgs};
use crate::child::{self, Grant};
use crate::exit::{self, Failure};
use crate::kind;
use crate::secs::human;
use crate::signals;
use crate::status_print::{self, EtcdFacts, Lock, On, Party, Place, Shown};

/// The exit code and message of a library error about `address`.
fn failure(address: &str, e: &Error) -> Failure {
    let code = match e {
        Error::InvalidEndpoint { .. } | Error::InvalidName { .. } | Error::InvalidOption { .. } => {
            exit::USAGE
        }
        Error::Unavailable { .. } => exit::QUORUM,
        Error::Refused { .. } => exit::DENIED,
        Error::Corrupt { .. } => exit::DATA,
        Error::LockLost { .. } => exit::LOST,
        _ => exit::SOFTWARE,
    };
    let mut msg = e.to_string();
    // A refusal's message already says what the cluster refused, and etcd's own words.
    let mut cause = match e {
        Error::Refused { .. } => None,
        _ => std::error::Error::source(e),
    };
    while let Some(c) = cause {
        let _ = write!(msg, ": {c}");
        cause = c.source();
    }
    Failure::new(code, format!("{address}: {msg}"))
}

fn connect(address: &str, lease: Option<Duration>) -> Result<EtcdLock, Failure> {
    let parsed = Address::parse(address).map_err(|e| failure(address, &e))?;
    let mut opts = EtcdLock::options();
    if let Some(ttl) = lease {
        opts.lease_ttl(ttl);
    }
    credentials(&mut opts, &parsed, address)?;
    opts.connect(&parsed.client_endpoints(), &parsed.name)
        .map_err(|e| failure(address, &e))
}

/// etcdctl's own environment: for `etcds://`, the CA (`ETCDCTL_CACERT`, required) and our
/// certificate and key (`ETCDCTL_CERT`, `ETCDCTL_KEY`); for either scheme, the user
/// (`ETCDCTL_USER=user:password`, or the password in `ETCDCTL_PASSWORD`). A user's existing
/// etcdctl set-up then just works. `etcd://` never uses TLS, whatever the environment says.
fn credentials(
    opts: &mut fairlock_etcd::EtcdOptions,
    a: &Address,
    address: &str,
) -> Result<(), Failure> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let read = |name: &str| -> Result<Option<Vec<u8>>, Failure> {
        let Some(path) = var(name) else {
            return Ok(None);
        };
        std::fs::read(&path).map(Some).map_err(|e| {
            Failure::new(
                exit::NO_INPUT,
                format!(
                    "{address}: {name}={}: cannot read it: {e}",
                    std::path::Path::new(&path).display()
                ),
            )
        })
    };
    if a.tls {
        let Some(ca) = read("ETCDCTL_CACERT")? else {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "{address}: etcds:// needs the CA certificate that signed the cluster's: \
                     set ETCDCTL_CACERT to its file (as for etcdctl)"
                ),
            ));
        };
        opts.ca_certificate(ca);
        match (read("ETCDCTL_CERT")?, read("ETCDCTL_KEY")?) {
            (Some(cert), Some(key)) => {
                opts.client_certificate(cert, key);
            }
            (None, None) => {}
            _ => {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "{address}: ETCDCTL_CERT and ETCDCTL_KEY go together: set both or neither"
                    ),
                ));
            }
        }
    }
    if let Some(user) = var("ETCDCTL_USER") {
        let user = user.to_string_lossy().into_owned();
        let (name, password) = match user.split_once(':') {
            Some((n, p)) => (n.to_owned(), p.to_owned()),
            None => match var("ETCDCTL_PASSWORD") {
                Some(p) => (user.clone(), p.to_string_lossy().into_owned()),
                None => {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!(
                            "{address}: ETCDCTL_USER={user} has no password: set \
                             ETCDCTL_USER=user:password, or ETCDCTL_PASSWORD (fairlock does \
                             not prompt)"
                        ),
                    ));
                }
            },
        };
        opts.user(name, password);
    }
    Ok(())
}

/// A failure while waiting in line (the command has not run). A waiter whose lease ended
/// (revoked, or this process stopped or cut off for longer than its TTL) exits 75: the
/// lock was never ours, so not 69 ("lost while the command ran"), and not 68 when the
/// cluster answers now (the trouble was ours, not a missing quorum).
fn waiting_failure(lock: &EtcdLock, address: &str, e: &Error) -> Failure {
    let lost_place = match e {
        Error::LockLost { .. } => true,
        Error::Unavailable { .. } => lock.status().is_ok(),
        _ => false,
    };
    if !lost_place {
        return failure(address, e);
    }
    let f = failure(address, e);
    Failure::new(
        exit::TEMP,
        format!(
            "{}; lost our place in line before the lock was granted: the command did not run",
            f.message
        ),
    )
}

/// Ends this process by `sig`, as its default action would have, once our lease is
/// revoked: the parent (a shell, `timeout`) sees the signal it sent.
fn die_of(sig: libc::c_int) -> ! {
    // SAFETY: resetting a handled signal to its default action and raising it has no
    // memory-safety preconditions; the default action of SIGINT, SIGTERM and SIGHUP ends
    // the process.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

pub fn run(a: &RunArgs, address: &str) -> Result<u8, Failure> {
    if kind::asks_for_a_kind(a) {
        return Err(Failure::new(
            exit::USAGE,
            format!("{address}: etcd locks are exclusive: -s and --permits need a lock file"),
        ));
    }
    if a.mode.is_some() {
        return Err(Failure::new(
            exit::USAGE,
            format!("{address}: --mode is the permission bits of a lock file; etcd has none"),
        ));
    }
    let started = Instant::now();
    if let Some(l) = a.lease
        && (l.subsec_nanos() != 0 || l.is_zero())
    {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--lease {}: etcd leases are whole seconds, at least 1",
                human(l)
            ),
        ));
    }
    // From the start, not only while the command runs: a signal that ended us while we
    // wait in line would leave our key there, under a lease nobody revokes, holding up
    // everyone behind it for a whole TTL. The handlers only record the signal; the watch
    // below revokes our lease, then we end by the signal.
    signals::install().map_err(|e| Failure::new(exit::OS, format!("sigaction: {e}")))?;
    let lock = connect(address, a.lease)?;
    let waiting = AtomicBool::new(true);
    let acquired = std::thread::scope(|scope| {
        scope.spawn(|| {
            while waiting.load(Ordering::SeqCst) {
                if signals::seen().is_some() {
                    // Every 20 ms until the acquisition ends: a session granted after one
                    // revocation (the acquisition had not started yet) is revoked too.
                    let _ = lock.close();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let r = acquire(&lock, a, address, started);
        waiting.store(false, Ordering::SeqCst);
        r
    });
    if let Some(sig) = signals::seen() {
        // Granted anyway (the signal came late): released cleanly, then revoked.
        drop(acquired);
        let _ = lock.close();
        die_of(sig);
    }
    let guard = acquired?;
    if a.verbose {
        eprintln!(
            "fairlock: got {address} (token {}) after {}{}",
            guard.token(),
            human(started.elapsed()),
            if guard.owner_died() {
                "; the previous holder's lease expired"
            } else {
                ""
            },
        );
    }
    let grant = Grant {
        token: guard.token(),
        owner_died: guard.owner_died(),
        lock: address.as_ref(),
        keep_alive: None,
    };
    // The lease is always there with etcd: watch it whether or not --lease was given.
    let ended = child::run(a, &grant, &|| guard.check().is_err())?;
    let ttl = guard.lease_ttl();
    let released = guard.unlock();
    match released {
        Err(Error::LockLost { why, .. }) => {
            return Err(Failure::new(
                exit::LOST,
                format!(
                    "{address}: lost the lock while the command ran (our {} lease could not \
                     be kept: {why}){}; the command {}",
                    human(ttl),
                    if a.kill_on_lost && ended.lost {
                        "; sent SIGTERM to the command"
                    } else {
                        ""
                    },
                    ended.describe(),
                ),
            ));
        }
        Err(e) if !ended.lost => {
            // The release could not be written (no quorum): the lease expires within its
            // TTL and the next holder is told owner_died. The command did run under the
            // lock, so its status stands; say what happened.
            eprintln!(
                "fairlock: {}; the lock is freed when our lease expires",
                failure(address, &e)
            );
        }
        _ => {}
    }
    if ended.lost {
        return Err(Failure::new(
            exit::LOST,
            format!(
                "{address}: lost the lock while the command ran (our {} lease ran out){}; the command {}",
                human(ttl),
                if a.kill_on_lost {
                    "; sent SIGTERM to the command"
                } else {
                    ""
                },
                ended.describe(),
            ),
        ));
    }
    if a.verbose {
        eprintln!(
            "fairlock: released {address}; the command {}",
            ended.describe()
        );
    }
    Ok(ended.code())
}

/// Waits in line as the options say (`-n`, `-w`).
fn acquire<'a>(
    lock: &'a EtcdLock,
    a: &RunArgs,
    address: &str,
    started: Instant,
) -> Result<EtcdGuard<'a>, Failure> {
    if a.nonblock {
        return lock.try_lock().map_err(|e| match e {
            Error::WouldBlock { .. } => a.conflict("is held or has waiters"),
            e => waiting_failure(lock, address, &e),
        });
    }
    if a.verbose
        && let Ok(st) = lock.status()
    {
        let ahead = st.waiters.len() + usize::from(st.holder.is_some());
        if ahead > 0 {
            eprintln!("fairlock: waiting for {address} ({ahead} ahead)");
        }
    }
    match a.wait {
        // What is left of -w (connecting took some): 0 left is one try.
        Some(d) => lock
            .lock_timeout(d.saturating_sub(started.elapsed()))
            .map_err(|e| match e {
                Error::Timeout { .. } => a.conflict(&format!("still busy after {}", human(d))),
                e => waiting_failure(lock, address, &e),
            }),
        None => lock.lock().map_err(|e| waiting_failure(lock, address, &e)),
    }
}

pub fn status(a: &StatusArgs, address: &str) -> Result<u8, Failure> {
    let lock = connect(address, None)?;
    let st = lock.status().map_err(|e| failure(address, &e))?;
    status_print::print(&Shown::One(shown(address, &st)), a.json);
    Ok(0)
}

/// The lock's state for the status printer.
fn shown(address: &str, st: &Status) -> Lock {
    // When free: the first waiter's token, or a key not written yet (after this revision).
    let next = st.waiters.first().map_or_else(
        || u64::try_from(st.revision.saturating_add(1)).unwrap_or(0),
        |w| w.token,
    );
    Lock {
        place: Place::Etcd(address.to_string()),
        name: Some(st.name.clone()),
        kind: LockKind::Exclusive,
        bypass_bound: None,
        holders: st
            .holder
            .iter()
            .map(|h| party(h, true, st.holder_owner_died))
            .collect(),
        waiters: st.waiters.iter().map(|w| party(w, false, false)).collect(),
        arriving: 0,
        token: st.holder.as_ref().map_or(next, |h| h.token),
        next_ticket: None,
        etcd: Some(EtcdFacts {
            last_token: st.last_token,
            revision: st.revision,
        }),
    }
}

/// A holder or waiter, from the record it wrote (`pid=… host=… since=UNIX_MS`). A waiter has
/// waited since it joined the line (by this host's clock); when a holder was granted is not
/// recorded.
fn party(e: &Entry, holder: bool, owner_died: bool) -> Party {
    let field = |key: &str| {
        e.owner
            .split_whitespace()
            .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
    };
    let waited = field("since")
        .and_then(|ms| ms.parse::<u64>().ok())
        .and_then(|ms| {
            SystemTime::UNIX_EPOCH
                .checked_add(Duration::from_millis(ms))?
                .elapsed()
                .ok()
        });
    Party {
        ticket: None,
        token: e.token,
        state: holder.then_some("held"),
        pid: field("pid").and_then(|p| p.parse().ok()),
        alive: None,
        elapsed: if holder { None } else { waited },
        owner_died,
        shared: false,
        on: On::Etcd {
            host: field("host").map(str::to_string),
            lease: e.lease,
            owner: e.owner.clone(),
        },
    }
}
