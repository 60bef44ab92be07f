//! The crate's one error type.

use std::fmt;
use std::io;

/// Everything that can go wrong with an etcd lock.
///
/// Every variant that concerns a lock names it (`name`); the ones about the cluster name the
/// endpoints. `Display` states the problem once; an underlying client error is the
/// [`source`](std::error::Error::source), not part of the message.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `try_lock`: the lock is held, or others are queued for it (try_lock never jumps the
    /// queue). A holder that died is still the holder until its lease's TTL has passed.
    WouldBlock {
        /// The lock's name.
        name: String,
    },
    /// `lock_timeout`: the deadline passed before the lock was granted; our place in the
    /// queue was given up.
    Timeout {
        /// The lock's name.
        name: String,
    },
    /// The lock is no longer ours, or never was granted: our lease could not be renewed
    /// within its TTL (the cluster was unreachable, the process was stopped, the lease was
    /// revoked) or our queue key was deleted. Another client may hold the lock now; anything
    /// done under the guard since may have overlapped it. Use the fencing token downstream.
    LockLost {
        /// The lock's name.
        name: String,
        /// What we know of why.
        why: String,
    },
    /// The cluster could not be reached, or has no quorum (no leader), within the
    /// configured timeouts.
    Unavailable {
        /// The endpoints we tried, comma-separated.
        endpoints: String,
        /// What we were doing.
        op: &'static str,
        /// The underlying error.
        source: etcd_client::Error,
    },
    /// The cluster refused us when we connected: a TLS certificate (theirs not signed by the
    /// CA we were given; ours missing, expired or not signed by a CA they trust) or the user
    /// and password. Retrying does not help; `why` says which, as far as we can tell.
    Refused {
        /// The endpoints we tried, comma-separated.
        endpoints: String,
        /// What was refused, and what to check.
        why: String,
        /// The underlying error.
        source: etcd_client::Error,
    },
    /// An endpoint is not `HOST:PORT`, `http://HOST:PORT` or `https://HOST:PORT`.
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A lock name is empty, too long, or holds a byte we do not put in a key.
    InvalidName {
        /// The name, with odd bytes escaped.
        name: String,
        /// What is wrong with it.
        what: &'static str,
    },
    /// An option value is out of range, or the blocking API was used inside an async
    /// runtime.
    InvalidOption {
        /// Which option, and why.
        what: String,
    },
    /// The lock's keys in etcd hold something this version did not write.
    Corrupt {
        /// The lock's name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// etcd refused a request for a reason other than reachability (permissions, a bad
    /// request); the client's error is the [`source`](std::error::Error::source).
    Etcd {
        /// The lock's name.
        name: String,
        /// What we were doing.
        op: &'static str,
        /// The underlying error.
        source: etcd_client::Error,
    },
}

impl Error {
    /// The lock's name this error concerns, if it concerns one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Error::WouldBlock { name }
            | Error::Timeout { name }
            | Error::LockLost { name, .. }
            | Error::InvalidName { name, .. }
            | Error::Corrupt { name, .. }
            | Error::Etcd { name, .. } => Some(name),
            Error::Unavailable { .. }
            | Error::Refused { .. }
            | Error::InvalidEndpoint { .. }
            | Error::InvalidOption { .. } => None,
        }
    }

    /// The [`io::ErrorKind`] this error converts to (see `From<Error> for io::Error`).
    pub fn kind(&self) -> io::ErrorKind {
        use io::ErrorKind as K;
        match self {
            Error::WouldBlock { .. } => K::WouldBlock,
            Error::Timeout { .. } => K::TimedOut,
            Error::LockLost { .. } | Error::Etcd { .. } => K::Other,
            Error::Unavailable { .. } => K::NotConnected,
            Error::Refused { .. } => K::PermissionDenied,
            Error::InvalidEndpoint { .. }
            | Error::InvalidName { .. }
            | Error::InvalidOption { .. } => K::InvalidInput,
            Error::Corrupt { .. } => K::InvalidData,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock { name } => write!(f, "lock {name:?}: held or has waiters"),
            Error::Timeout { name } => write!(f, "lock {name:?}: timed out waiting"),
            Error::LockLost { name, why } => write!(f, "lock {name:?}: lost ({why})"),
            Error::Unavailable { endpoints, op, .. } => write!(
                f,
                "etcd at {endpoints}: cannot reach a quorum ({op}): unreachable, refused or without a leader"
            ),
            Error::Refused { endpoints, why, .. } => write!(f, "etcd at {endpoints}: {why}"),
            Error::InvalidEndpoint { endpoint, what } => {
                write!(f, "etcd endpoint {endpoint:?}: {what}")
            }
            Error::InvalidName { name, what } => write!(f, "lock name \"{name}\": {what}"),
            Error::InvalidOption { what } => write!(f, "invalid option: {what}"),
            Error::Corrupt { name, what } => {
                write!(f, "lock {name:?}: unexpected data in etcd: {what}")
            }
            Error::Etcd { name, op, .. } => write!(f, "lock {name:?}: etcd refused {op}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unavailable { source, .. }
            | Error::Refused { source, .. }
            | Error::Etcd { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the cluster refused, if a connection's error `e` says it refused us rather than
/// that it could not be reached: the password, the TLS certificate it sent us (not signed by
/// our CA), or ours (`tls`: a TLS connection the cluster ended during the handshake, with a
/// fatal alert or by closing it, which is how a TLS 1.3 server turns down a client certificate
/// that is missing, expired or signed by a CA it does not trust; which of the two the client
/// sees first is a race).
pub(crate) fn refusal(e: &etcd_client::Error, tls: bool) -> Option<String> {
    let etcd_client::Error::GRpcStatus(s) = e else {
        return None;
    };
    let message = s.message();
    if matches!(
        s.code(),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
    ) || message.contains("authentication failed")
    {
        return Some(format!(
            "authentication failed: check the user and password (etcdctl's --user, \
             ETCDCTL_USER); etcd said: {message}"
        ));
    }
    if message.contains("invalid peer certificate") {
        return Some(format!(
            "TLS: the cluster's certificate is not trusted ({message}): is the CA certificate \
             given (etcdctl's --cacert, ETCDCTL_CACERT) the one that signed it, and does it \
             name this host?"
        ));
    }
    let mut chain = String::new();
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = src {
        chain.push_str(&x.to_string());
        src = x.source();
    }
    if tls
        && (chain.contains("broken pipe")
            || chain.contains("reset by peer")
            || chain.contains("received fatal alert")
            || chain.contains("close_notify"))
    {
        return Some(
            "TLS: the cluster closed the connection in the handshake: it refused our client \
             certificate (missing, expired, or not signed by a CA it trusts: etcdctl's --cert \
             and --key, ETCDCTL_CERT and ETCDCTL_KEY)"
                .to_owned(),
        );
    }
    None
}

/// Whether a client error says the cluster could not be reached or had no quorum (worth
/// retrying while our lease lives), rather than that it refused the request.
pub(crate) fn is_unavailable(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::TransportError(_) | E::IoError(_) => true,
        // Unknown: etcd's own transient errors ("etcdserver: request timed out", a member
        // without a leader) and a broken HTTP/2 connection ("h2 protocol error") both come as
        // Unknown; what etcd refuses for good comes with a definite code.
        E::GRpcStatus(s) => matches!(
            s.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Aborted
                | tonic::Code::Unknown
        ),
        // The keep-alive and watch helpers report a closed stream this way.
        E::LeaseKeepAliveError(m) | E::WatchError(m) => !m.contains("not found"),
        _ => false,
    }
}
