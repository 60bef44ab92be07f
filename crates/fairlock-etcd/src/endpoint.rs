//! Endpoints (`HOST:PORT`, `http://HOST:PORT`) and lock addresses (`etcd://HOST:PORT[,…]/NAME`).

use crate::error::{Error, Result};
use crate::keys;

/// The scheme of a lock address.
pub const SCHEME: &str = "etcd://";

/// An endpoint in the form the client wants (`http://HOST:PORT`).
pub(crate) fn normalize(endpoint: &str) -> Result<String> {
    let bad = |what| Error::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        what,
    };
    if endpoint.starts_with("https://") {
        return Err(bad("TLS (https://) is not supported by this build"));
    }
    let rest = endpoint.strip_prefix("http://").unwrap_or(endpoint);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains("://") {
        return Err(bad("unknown scheme (only http:// or none)"));
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
    Ok(format!("http://{host}:{port}"))
}

/// Checks and normalises a list of endpoints; at least one.
pub(crate) fn normalize_all<S: AsRef<str>>(endpoints: &[S]) -> Result<Vec<String>> {
    if endpoints.is_empty() {
        return Err(Error::InvalidEndpoint {
            endpoint: String::new(),
            what: "no endpoints given",
        });
    }
    endpoints.iter().map(|e| normalize(e.as_ref())).collect()
}

/// A parsed lock address `etcd://HOST:PORT[,HOST:PORT…]/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The endpoints, as `HOST:PORT`.
    pub endpoints: Vec<String>,
    /// The lock's name.
    pub name: String,
}

impl Address {
    /// Parses `etcd://HOST:PORT[,HOST:PORT…]/NAME`, checking every endpoint and the name.
    pub fn parse(address: &str) -> Result<Address> {
        let bad = |what| Error::InvalidEndpoint {
            endpoint: address.to_owned(),
            what,
        };
        let rest = address
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("does not start with etcd://"))?;
        let (hosts, name) = rest
            .split_once('/')
            .ok_or_else(|| bad("no lock name: etcd://HOST:PORT[,HOST:PORT...]/NAME"))?;
        if hosts.is_empty() {
            return Err(bad("no HOST:PORT before the lock name"));
        }
        let endpoints: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        for e in &endpoints {
            normalize(e)?;
        }
        keys::validate(name)?;
        Ok(Address {
            endpoints,
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.endpoints.join(","), self.name)
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
            (
                "https://h:1",
                "TLS (https://) is not supported by this build",
            ),
            ("grpc://h:1", "unknown scheme (only http:// or none)"),
        ] {
            match normalize(bad) {
                Err(Error::InvalidEndpoint { what: w, .. }) => assert_eq!(w, what, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(normalize_all::<&str>(&[]).is_err());
    }

    #[test]
    fn addresses() {
        let a = Address::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/jobs").unwrap();
        assert_eq!(a.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(a.name, "jobs");
        assert_eq!(a.to_string(), "etcd://10.0.0.1:2379,10.0.0.2:2379/jobs");
        for bad in [
            "etcd:/h:1/x",
            "etcd://h:1",
            "etcd:///x",
            "etcd://h:1/",
            "etcd://h:1/a/b",
            "etcd://h:1,/x",
            "etcd://h/x",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
    }
}
