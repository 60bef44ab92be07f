//! Endpoints (`HOST:PORT`, `http://HOST:PORT`, `https://HOST:PORT`) and lock addresses
//! (`etcd://HOST:PORT[,…]/NAME`, `etcds://…` for TLS).

use crate::error::{Error, Result};
use crate::keys;

/// The scheme of a lock address.
pub const SCHEME: &str = "etcd://";
/// The scheme of a lock address whose cluster is reached through TLS (as `rediss://` and
/// `amqps://` name theirs).
pub const TLS_SCHEME: &str = "etcds://";

/// An endpoint in the form the client wants (`http://HOST:PORT`, or `https://HOST:PORT` for
/// TLS).
pub(crate) fn normalize(endpoint: &str) -> Result<String> {
    let bad = |what| Error::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        what,
    };
    let (scheme, rest) = match endpoint.strip_prefix("https://") {
        Some(rest) => ("https", rest),
        None => ("http", endpoint.strip_prefix("http://").unwrap_or(endpoint)),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains("://") {
        return Err(bad("unknown scheme (http://, https:// or none)"));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => (h, p),
        _ => return Err(bad("not HOST:PORT")),
    };
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("the port is not a number"));
    }
    match port.parse::<u32>() {
        Ok(1..=65535) => {}
        _ => return Err(bad("the port is not in 1..=65535")),
    }
    let host_ok = if let Some(v6) = host.strip_prefix('[') {
        v6.strip_suffix(']')
            .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        host.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    if !host_ok {
        return Err(bad("the host is not a name or an address"));
    }
    Ok(format!("{scheme}://{host}:{port}"))
}

/// Checks and normalises a list of endpoints (at least one, all `https://` or none), and
/// whether they are TLS ones.
pub(crate) fn normalize_all<S: AsRef<str>>(endpoints: &[S]) -> Result<(Vec<String>, bool)> {
    if endpoints.is_empty() {
        return Err(Error::InvalidEndpoint {
            endpoint: String::new(),
            what: "no endpoints given",
        });
    }
    let all = endpoints
        .iter()
        .map(|e| normalize(e.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    let tls = all[0].starts_with("https://");
    if let Some(odd) = all.iter().position(|e| e.starts_with("https://") != tls) {
        return Err(Error::InvalidEndpoint {
            endpoint: endpoints[odd].as_ref().to_owned(),
            what: "mixes https:// and http:// endpoints: all or none use TLS",
        });
    }
    Ok((all, tls))
}

/// A parsed lock address `etcd://HOST:PORT[,HOST:PORT…]/NAME`, or `etcds://…` for a cluster
/// reached through TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The endpoints, as `HOST:PORT`.
    pub endpoints: Vec<String>,
    /// The lock's name.
    pub name: String,
    /// Whether the cluster is reached through TLS (`etcds://`).
    pub tls: bool,
}

impl Address {
    /// Parses `etcd://HOST:PORT[,HOST:PORT…]/NAME` (or `etcds://…`), checking every endpoint
    /// and the name.
    pub fn parse(address: &str) -> Result<Address> {
        let bad = |what| Error::InvalidEndpoint {
            endpoint: address.to_owned(),
            what,
        };
        let (tls, rest) = match address.strip_prefix(TLS_SCHEME) {
            Some(rest) => (true, rest),
            None => (
                false,
                address
                    .strip_prefix(SCHEME)
                    .ok_or_else(|| bad("does not start with etcd:// or etcds://"))?,
            ),
        };
        let (hosts, name) = rest
            .split_once('/')
            .ok_or_else(|| bad("no lock name: etcd://HOST:PORT[,HOST:PORT...]/NAME"))?;
        if hosts.is_empty() {
            return Err(bad("no HOST:PORT before the lock name"));
        }
        let endpoints: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        for e in &endpoints {
            if e.contains("://") {
                return Err(bad(
                    "an endpoint of an address is HOST:PORT, without a scheme",
                ));
            }
            normalize(e)?;
        }
        keys::validate(name)?;
        Ok(Address {
            endpoints,
            name: name.to_owned(),
            tls,
        })
    }

    /// The endpoints as a client takes them: `https://HOST:PORT` for `etcds://`, else
    /// `HOST:PORT`.
    pub fn client_endpoints(&self) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|e| {
                if self.tls {
                    format!("https://{e}")
                } else {
                    e.clone()
                }
            })
            .collect()
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { TLS_SCHEME } else { SCHEME };
        write!(f, "{scheme}{}/{}", self.endpoints.join(","), self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            normalize("127.0.0.1:2379").unwrap(),
            "http://127.0.0.1:2379"
        );
        assert_eq!(
            normalize("http://etcd-1.example:2379/").unwrap(),
            "http://etcd-1.example:2379"
        );
        assert_eq!(normalize("[::1]:2379").unwrap(), "http://[::1]:2379");
        for (bad, what) in [
            ("127.0.0.1", "not HOST:PORT"),
            (":2379", "not HOST:PORT"),
            ("h:", "the port is not a number"),
            ("h:x1", "the port is not a number"),
            ("h:0", "the port is not in 1..=65535"),
            ("h:70000", "the port is not in 1..=65535"),
            ("h st:1", "the host is not a name or an address"),
            ("[::1:2379", "the host is not a name or an address"),
            ("grpc://h:1", "unknown scheme (http://, https:// or none)"),
        ] {
            match normalize(bad) {
                Err(Error::InvalidEndpoint { what: w, .. }) => assert_eq!(w, what, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(normalize("https://h:1").unwrap(), "https://h:1");
        assert!(normalize_all::<&str>(&[]).is_err());
        assert_eq!(
            normalize_all(&["https://a:1", "https://b:2"]).unwrap(),
            (
                vec!["https://a:1".to_owned(), "https://b:2".to_owned()],
                true
            )
        );
        assert!(!normalize_all(&["a:1"]).unwrap().1);
        match normalize_all(&["https://a:1", "b:2"]) {
            Err(Error::InvalidEndpoint { endpoint, what }) => {
                assert_eq!(endpoint, "b:2");
                assert!(what.contains("mixes"), "{what}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn addresses() {
        let a = Address::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/jobs").unwrap();
        assert_eq!(a.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(a.name, "jobs");
        assert_eq!(a.to_string(), "etcd://10.0.0.1:2379,10.0.0.2:2379/jobs");
        assert!(!a.tls);
        assert_eq!(a.client_endpoints(), ["10.0.0.1:2379", "10.0.0.2:2379"]);
        let t = Address::parse("etcds://h:2379/jobs").unwrap();
        assert!(t.tls);
        assert_eq!(t.client_endpoints(), ["https://h:2379"]);
        assert_eq!(t.to_string(), "etcds://h:2379/jobs");
        for bad in [
            "etcd:/h:1/x",
            "etcd://h:1",
            "etcd:///x",
            "etcd://h:1/",
            "etcd://h:1/a/b",
            "etcd://h:1,/x",
            "etcd://h/x",
            "etcds://h:1",
            "etcd://https://h:1/x",
            "redis://h:1/x",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
    }
}
