//! A cluster that requires TLS, clients' certificates and a password: the lock works with
//! the right ones, and every wrong one is a clear error, soon, never a hang.

use std::time::{Duration, Instant};

use crate::common::secure::{PASSWORD, SecureEtcd};
use fairlock_etcd::{Error, EtcdLock, EtcdOptions};

fn read(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

/// Options with the right CA, the valid client certificate and root's password.
fn good(e: &SecureEtcd) -> EtcdOptions {
    let mut o = EtcdLock::options();
    o.lease_ttl(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(2))
        .ca_certificate(read(&e.files.ca))
        .client_certificate(read(&e.files.cert), read(&e.files.key))
        .user("root", PASSWORD);
    o
}

/// The error of connecting with `o`, and how long it took to come.
fn refused(e: &SecureEtcd, o: &EtcdOptions) -> (Error, Duration) {
    let start = Instant::now();
    let err = o
        .connect(&[format!("https://{}", e.endpoint())], "tls")
        .map(|_| ())
        .expect_err("connecting must fail");
    (err, start.elapsed())
}

/// The error and its sources, as one line.
fn chain(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(&format!(": {x}"));
        src = x.source();
    }
    s
}

#[test]
fn with_the_right_ca_certificate_and_password_the_lock_works() {
    let e = SecureEtcd::start("good");
    let lock = good(&e)
        .connect(&[format!("https://{}", e.endpoint())], "tls")
        .unwrap_or_else(|err| panic!("{}", chain(&err)));
    let g = lock.lock().unwrap();
    assert!(g.token() > 0);
    let s = lock.status().unwrap();
    assert!(s.holder.is_some(), "{s:?}");
    g.unlock().unwrap();
    let again = lock.try_lock().unwrap();
    drop(again);
}

#[test]
fn every_wrong_credential_is_a_clear_error_never_a_hang() {
    let e = SecureEtcd::start("bad");
    type Case<'a> = (&'a str, EtcdOptions, &'a [&'a str]);
    let cases: Vec<Case<'_>> = vec![
        (
            "a wrong CA",
            {
                let mut o = good(&e);
                o.ca_certificate(read(&e.files.other_ca));
                o
            },
            &[
                "the cluster's certificate is not trusted",
                "UnknownIssuer",
                "ETCDCTL_CACERT",
            ],
        ),
        (
            "an expired client certificate",
            {
                let mut o = good(&e);
                o.client_certificate(read(&e.files.expired_cert), read(&e.files.expired_key));
                o
            },
            &["refused our client certificate", "expired", "ETCDCTL_CERT"],
        ),
        (
            "no client certificate",
            {
                let mut o = EtcdLock::options();
                o.request_timeout(Duration::from_secs(2))
                    .ca_certificate(read(&e.files.ca))
                    .user("root", PASSWORD);
                o
            },
            &["refused our client certificate", "missing"],
        ),
        (
            "a wrong password",
            {
                let mut o = good(&e);
                o.user("root", "not-the-password");
                o
            },
            &[
                "authentication failed",
                "ETCDCTL_USER",
                "invalid user ID or password",
            ],
        ),
    ];
    for (what, o, words) in cases {
        let (err, took) = refused(&e, &o);
        let text = err.to_string();
        assert!(
            matches!(err, Error::Refused { .. }),
            "{what}: {}",
            chain(&err)
        );
        for w in words {
            assert!(text.contains(w), "{what}: {w:?} not in {text:?}");
        }
        assert!(text.contains(&e.endpoint()), "{what}: {text}");
        assert!(!text.contains("  "), "{what}: a run of spaces in {text:?}");
        assert_eq!(
            std::io::Error::from(err).kind(),
            std::io::ErrorKind::PermissionDenied,
            "{what}"
        );
        // Refused at once, not retried until a timeout.
        assert!(took < Duration::from_secs(2), "{what}: took {took:?}");
    }
}

#[test]
fn tls_options_that_cannot_fit_the_endpoints_are_refused_before_connecting() {
    let mut no_ca = EtcdLock::options();
    no_ca.user("root", PASSWORD);
    match no_ca.connect(&["https://127.0.0.1:1"], "tls") {
        Err(Error::InvalidOption { what }) => {
            assert!(
                what.contains("CA certificate") && what.contains("--cacert"),
                "{what}"
            );
            assert!(!what.contains("  "), "a run of spaces in {what:?}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let mut plain = EtcdLock::options();
    plain.ca_certificate(b"-----BEGIN CERTIFICATE-----".to_vec());
    match plain.connect(&["127.0.0.1:1"], "tls") {
        Err(Error::InvalidOption { what }) => {
            assert!(
                what.contains("https://") && !what.contains("  "),
                "{what:?}"
            )
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    match EtcdLock::connect(&["https://127.0.0.1:1", "127.0.0.1:2"], "tls") {
        Err(Error::InvalidEndpoint { what, .. }) => assert!(what.contains("mixes"), "{what}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // The password and the key never show in the options' Debug.
    let mut o = EtcdLock::options();
    o.user("root", "s3cret")
        .client_certificate(b"CERT".to_vec(), b"KEY-BYTES".to_vec());
    let shown = format!("{o:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("KEY-BYTES"),
        "{shown}"
    );
    assert!(shown.contains("root"), "{shown}");
}
