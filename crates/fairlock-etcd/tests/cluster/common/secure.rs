//! A real one-member etcd that requires TLS, clients' certificates and a password, as
//! production clusters do: started by the test on 127.0.0.1 ports of its own, with
//! certificates made at test time (rcgen), authentication enabled through etcdctl; killed
//! (and its directory removed) when dropped. Shared with the CLI's tests by `#[path]`.

#![allow(dead_code)] // not every helper is used by every build of the tests

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::cluster::{free_ports, fresh_dir, spawn_member, wait_writable};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The root user's password.
pub const PASSWORD: &str = "fairlock-test-password";

/// A CA: its certificate in PEM and what signs with it.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `cn` (and, for a server, 127.0.0.1) valid from `from` to `to`
    /// (years): (certificate PEM, key PEM).
    fn sign(&self, cn: &str, server: bool, from: i32, to: i32) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        if server {
            params.subject_alt_names = vec![
                SanType::IpAddress("127.0.0.1".parse().unwrap()),
                SanType::DnsName("localhost".try_into().unwrap()),
            ];
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The files a client may be given, all in the etcd's directory.
pub struct Files {
    /// The CA that signed the member's certificate and the clients' good ones.
    pub ca: PathBuf,
    /// Another CA, which signed nothing of the member's.
    pub other_ca: PathBuf,
    /// A valid client certificate for the user `root`, and its key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client certificate for `root` that expired in 2021, and its key.
    pub expired_cert: PathBuf,
    pub expired_key: PathBuf,
}

/// The running etcd.
pub struct SecureEtcd {
    dir: PathBuf,
    port: u16,
    child: Child,
    pub files: Files,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

impl SecureEtcd {
    /// Starts the member with TLS and client-certificate checks, makes the user `root` with
    /// [`PASSWORD`] and enables authentication; returns once `root` can write.
    pub fn start(tag: &str) -> SecureEtcd {
        let dir = fresh_dir(&format!("tls-{tag}"));
        let ca = Ca::new("fairlock test CA");
        let other = Ca::new("another CA");
        let (server_cert, server_key) = ca.sign("127.0.0.1", true, 2020, 2100);
        let (cert, key) = ca.sign("root", false, 2020, 2100);
        let (expired_cert, expired_key) = ca.sign("root", false, 2020, 2021);
        let files = Files {
            ca: write(&dir, "ca.pem", &ca.pem),
            other_ca: write(&dir, "other-ca.pem", &other.pem),
            cert: write(&dir, "client.pem", &cert),
            key: write(&dir, "client-key.pem", &key),
            expired_cert: write(&dir, "expired.pem", &expired_cert),
            expired_key: write(&dir, "expired-key.pem", &expired_key),
        };
        let server_cert = write(&dir, "server.pem", &server_cert);
        let server_key = write(&dir, "server-key.pem", &server_key);
        let ports = free_ports(2);
        let (port, peer) = (ports[0], ports[1]);
        let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg("secure")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen-client-urls")
            .arg(format!("https://127.0.0.1:{port}"))
            .arg("--advertise-client-urls")
            .arg(format!("https://127.0.0.1:{port}"))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-cluster")
            .arg(format!("secure=http://127.0.0.1:{peer}"))
            .arg("--cert-file")
            .arg(&server_cert)
            .arg("--key-file")
            .arg(&server_key)
            .arg("--client-cert-auth")
            .arg("--trusted-ca-file")
            .arg(&files.ca)
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = spawn_member(&mut cmd);
        let e = SecureEtcd {
            dir,
            port,
            child,
            files,
        };
        e.wait_ready(Duration::from_secs(30));
        // The root user and role, then authentication on: from now on every request needs
        // the password (or, without one, a client certificate whose name is a user).
        e.etcdctl(&["user", "add", &format!("root:{PASSWORD}")])
            .expect("etcdctl user add root");
        let _ = e.etcdctl(&["user", "grant-role", "root", "root"]);
        e.etcdctl(&["auth", "enable"]).expect("etcdctl auth enable");
        e.etcdctl(&[
            &format!("--user=root:{PASSWORD}"),
            "put",
            "fairlock-test/auth",
            "1",
        ])
        .expect("a write as root after auth enable");
        e
    }

    /// `HOST:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `etcds://HOST:PORT/NAME`.
    pub fn address(&self, name: &str) -> String {
        format!("etcds://{}/{name}", self.endpoint())
    }

    /// The member's data and log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `etcdctl` against the member with the CA and the valid client certificate.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=https://{}", self.endpoint()))
            .arg(format!("--cacert={}", self.files.ca.display()))
            .arg(format!("--cert={}", self.files.cert.display()))
            .arg(format!("--key={}", self.files.key.display()))
            .arg("--command-timeout=2s")
            .args(args)
            .output()
            .expect("run etcdctl (is etcd-client installed?)");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn wait_ready(&self, limit: Duration) {
        wait_writable(&self.dir, limit, || {
            self.etcdctl(&["put", "fairlock-test/ready", "1"])
        });
    }
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
