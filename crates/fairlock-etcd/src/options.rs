//! [`EtcdOptions`]: the lease TTL and the timeouts, and their validation. The `connect` calls
//! that use them are with the locks they open: `EtcdOptions::connect` in `blocking.rs`,
//! `EtcdOptions::connect_async` in `asynchronous.rs`.

use std::time::Duration;

use crate::error::{Error, Result};

/// Options for connecting to an etcd lock: `EtcdLock::options().lease_ttl(…).connect(…)`.
///
/// | option | default | meaning |
/// |---|---|---|
/// | [`lease_ttl`](Self::lease_ttl) | 10 s | how long the lock outlives a client that stopped renewing (crashed, stopped, cut off): the longest a dead holder blocks the others, and the shortest time after which a holder cut off from etcd loses the lock |
/// | [`connect_timeout`](Self::connect_timeout) | 2 s | for each TCP connection to an endpoint |
/// | [`request_timeout`](Self::request_timeout) | 5 s | for each request; transient failures are retried within the calls' own deadlines |
///
/// A cluster that requires TLS is reached through `https://HOST:PORT` endpoints, with the CA
/// that signed its members' certificates ([`ca_certificate`](Self::ca_certificate)) and, if it
/// checks clients' certificates, ours ([`client_certificate`](Self::client_certificate)); one
/// with authentication enabled, with a [`user`](Self::user). `Debug` never shows the password
/// or the key.
#[derive(Clone)]
pub struct EtcdOptions {
    pub(crate) lease_ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    /// PEM of the CA certificate(s) that signed the cluster's (https:// endpoints only).
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// PEM of our certificate (chain) and of its private key.
    pub(crate) identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// User name and password.
    pub(crate) user: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("lease_ttl", &self.lease_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("ca_certificate", &self.ca_pem.as_ref().map(|_| "(PEM)"))
            .field(
                "client_certificate",
                &self.identity_pem.as_ref().map(|_| "(PEM, key hidden)"),
            )
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// The longest `connect_timeout` and `request_timeout` accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            lease_ttl: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            ca_pem: None,
            identity_pem: None,
            user: None,
        }
    }
}

impl EtcdOptions {
    /// The default options.
    pub fn new() -> EtcdOptions {
        EtcdOptions::default()
    }

    /// The lease's time to live: a whole number of seconds, at least 1 (etcd's unit; etcd
    /// may raise it to its own minimum, which the guard then uses). Keep-alives are sent
    /// every third of it.
    pub fn lease_ttl(&mut self, ttl: Duration) -> &mut Self {
        self.lease_ttl = ttl;
        self
    }

    /// The timeout of each TCP connection attempt (at most a day).
    pub fn connect_timeout(&mut self, d: Duration) -> &mut Self {
        self.connect_timeout = d;
        self
    }

    /// The timeout of each request to etcd (at most a day). One attempt of a request made for
    /// a lease also waits at most a sixth of its TTL (at least 200 ms), as keep-alives do, so
    /// that one stuck on a member that hangs is retried while the lease lives.
    pub fn request_timeout(&mut self, d: Duration) -> &mut Self {
        self.request_timeout = d;
        self
    }

    /// The CA certificate(s), in PEM, that signed the cluster members' certificates: needed
    /// for `https://` endpoints (only these CAs are trusted: not the system's), refused with
    /// `http://` ones. etcdctl's `--cacert`.
    pub fn ca_certificate(&mut self, pem: impl Into<Vec<u8>>) -> &mut Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Our certificate (chain) and its private key, in PEM, for a cluster that checks
    /// clients' certificates (etcd's `--client-cert-auth`). etcdctl's `--cert` and `--key`.
    pub fn client_certificate(
        &mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.identity_pem = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The user and password, for a cluster with authentication enabled (`etcdctl auth
    /// enable`). etcdctl's `--user USER:PASSWORD`.
    pub fn user(&mut self, name: impl Into<String>, password: impl Into<String>) -> &mut Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Checks the TLS options against the endpoints' scheme (`tls`: they are `https://`).
    pub(crate) fn validate_tls(&self, tls: bool) -> Result<()> {
        let bad = |what: &str| {
            Err(Error::InvalidOption {
                what: what.to_owned(),
            })
        };
        match (tls, &self.ca_pem, &self.identity_pem) {
            (true, None, _) => bad(
                "https:// endpoints need the CA certificate that signed the cluster's \
                 (EtcdOptions::ca_certificate; etcdctl's --cacert)",
            ),
            (false, Some(_), _) | (false, _, Some(_)) => bad(
                "certificates were given but the endpoints are http://: use https:// \
                 endpoints for TLS",
            ),
            _ => Ok(()),
        }
    }

    pub(crate) fn validate(&self) -> Result<i64> {
        let bad = |what: String| Err(Error::InvalidOption { what });
        let ttl = self.lease_ttl;
        if ttl.subsec_nanos() != 0 || ttl.as_secs() == 0 {
            return bad(format!(
                "lease_ttl {ttl:?}: etcd leases are whole seconds, at least 1"
            ));
        }
        let Ok(ttl_s) = i64::try_from(ttl.as_secs()) else {
            return bad(format!("lease_ttl {ttl:?}: too long"));
        };
        if ttl_s > 9_000_000_000 {
            return bad(format!("lease_ttl {ttl:?}: longer than etcd's maximum"));
        }
        for (what, d) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if d.is_zero() {
                return bad(format!("{what} is zero"));
            }
            // Timeouts are added to instants and doubled here and in the client (HTTP/2
            // keep-alive): refuse values that could overflow, rather than panic later.
            if d > MAX_TIMEOUT {
                return bad(format!("{what} {d:?}: more than a day"));
            }
        }
        Ok(ttl_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert_eq!(EtcdOptions::new().validate().unwrap(), 10);
        for (o, what) in [
            (
                EtcdOptions::new()
                    .lease_ttl(Duration::from_millis(1500))
                    .clone(),
                "whole seconds",
            ),
            (
                EtcdOptions::new().lease_ttl(Duration::ZERO).clone(),
                "whole seconds",
            ),
            (
                EtcdOptions::new().request_timeout(Duration::ZERO).clone(),
                "request_timeout",
            ),
            (
                EtcdOptions::new().connect_timeout(Duration::ZERO).clone(),
                "connect_timeout",
            ),
            (
                EtcdOptions::new().request_timeout(Duration::MAX).clone(),
                "more than a day",
            ),
            (
                EtcdOptions::new()
                    .connect_timeout(Duration::from_secs(86_401))
                    .clone(),
                "more than a day",
            ),
        ] {
            match o.validate() {
                Err(Error::InvalidOption { what: w }) => assert!(w.contains(what), "{w}"),
                other => panic!("{o:?}: {other:?}"),
            }
        }
    }
}
