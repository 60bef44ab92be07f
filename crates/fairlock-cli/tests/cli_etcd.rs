//! `fairlock run/status etcd://…` against a real 3-member etcd cluster, driven the way shell
//! scripts drive it: the built binary, real processes, exit codes and environment.

#![cfg(feature = "etcd")]

#[path = "../../fairlock-etcd/tests/cluster/common/cluster.rs"]
mod cluster;
#[path = "../../fairlock-etcd/tests/cluster/common/secure.rs"]
mod secure;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use cluster::Cluster;
use secure::{PASSWORD, SecureEtcd};

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

fn fairlock(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    c
}

fn run(args: &[&str]) -> Output {
    fairlock(args).output().unwrap()
}

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fairlock-cli-etcd-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `fairlock status --json ADDRESS`.
fn status_json(address: &str) -> String {
    let o = run(&["status", "--json", address]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn waiters(address: &str) -> usize {
    let j = status_json(address);
    let w = j.split("\"waiters\":").nth(1).unwrap();
    w[..w.find(',').unwrap()].parse().unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `fairlock run` that holds ADDRESS until `release` exists (with --lease TTL), or its
/// directory is gone (a test that removes it right after writing `release` must not leave the
/// loop of a SIGKILLed holder's orphaned command running for good).
fn holder(address: &str, ttl: &str, release: &std::path::Path) -> Child {
    let script = format!(
        "echo $FAIRLOCK_TOKEN > {0}.token; while [ ! -e {0} ] && [ -d {1} ]; do sleep 0.02; done",
        release.display(),
        release.parent().unwrap().display()
    );
    fairlock(&["run", "--lease", ttl, address, "-c", &script])
        .spawn()
        .unwrap()
}

#[test]
fn run_is_fifo_and_passes_token_owner_died_and_address() {
    let cluster = Cluster::start("cli-fifo");
    let dir = temp("fifo");
    let address = cluster.address("jobs");
    let release = dir.join("release");
    let mut first = holder(&address, "5", &release);
    wait_for("the first holder", Duration::from_secs(20), || {
        dir.join("release.token").exists()
    });
    let log = dir.join("log");
    let mut children = Vec::new();
    for i in 0..4 {
        let script = format!(
            "echo \"$FAIRLOCK_TOKEN $FAIRLOCK_OWNER_DIED $FAIRLOCK_FILE {i}\" >> {}; sleep 0.05",
            log.display()
        );
        children.push(fairlock(&["run", &address, "-c", &script]).spawn().unwrap());
        wait_for("queued", Duration::from_secs(20), || {
            waiters(&address) == i + 1
        });
    }
    std::fs::write(&release, "").unwrap();
    assert!(first.wait().unwrap().success());
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let mut last: u64 = std::fs::read_to_string(dir.join("release.token"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 4, "{text}");
        let token: u64 = f[0].parse().unwrap();
        assert!(token > last, "{text}");
        last = token;
        assert_eq!(f[1], "0", "{text}");
        assert_eq!(f[2], address, "{text}");
        assert_eq!(f[3], i.to_string(), "out of arrival order:\n{text}");
    }
    assert_eq!(text.lines().count(), 4);
    let j = status_json(&address);
    assert!(
        j.contains("\"held\":false") && j.contains("\"waiters\":0"),
        "{j}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn conflicts_timeouts_and_a_killed_holder() {
    let cluster = Cluster::start("cli-conflict");
    let dir = temp("conflict");
    let address = cluster.address("c");
    let release = dir.join("release");
    let mut h = holder(&address, "2", &release);
    wait_for("the holder", Duration::from_secs(20), || {
        dir.join("release.token").exists()
    });

    let o = run(&["run", "-n", &address, "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stderr.is_empty(), "-n is silent without -v");
    let o = run(&["run", "-n", "-E", "75", "-v", &address, "true"]);
    assert_eq!(o.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&o.stderr).contains("held or has waiters"));
    let start = Instant::now();
    let o = run(&["run", "-w", "0.4", &address, "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(start.elapsed() >= Duration::from_millis(400));

    // Status shows the holder (the `fairlock run` process, which holds the lease), in the
    // lines of a lock file's status.
    let o = run(&["status", &address]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!("holder:         pid {}, host ", h.id())),
        "{text}"
    );
    let j = status_json(&address);
    assert!(
        j.contains(&format!("\"held\":true,\"owner_pid\":{},", h.id())),
        "{j}"
    );

    // SIGKILL the holding fairlock: the next gets the lock after the 2 s TTL, told.
    h.kill().unwrap();
    let killed = Instant::now();
    h.wait().unwrap();
    let o = run(&["run", "-v", &address, "-c", "echo $FAIRLOCK_OWNER_DIED"]);
    let took = killed.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1");
    assert!(String::from_utf8_lossy(&o.stderr).contains("lease expired"));
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(8),
        "{took:?}"
    );
    // And the command's own status is passed on.
    let o = run(&["run", &address, "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    // The killed fairlock's command outlived it (documented): let it end, or it keeps the
    // test harness's output pipe open.
    std::fs::write(&release, "").unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_stopped_holder_past_its_lease_exits_69() {
    let cluster = Cluster::start("cli-lost");
    let dir = temp("lost");
    let address = cluster.address("l");
    let release = dir.join("release");
    let h = holder(&address, "2", &release);
    wait_for("the holder", Duration::from_secs(20), || {
        dir.join("release.token").exists()
    });
    let pid = h.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let o = run(&[
        "run",
        "-w",
        "20",
        &address,
        "-c",
        "echo $FAIRLOCK_OWNER_DIED",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1");
    std::fs::write(&release, "").unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let o = h.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(69), "signal {:?}", o.status.signal());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unreachable_clusters_bad_addresses_and_status() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = run(&["run", &format!("etcd://127.0.0.1:{port}/x"), "true"]);
    assert_eq!(
        o.status.code(),
        Some(68),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot reach a quorum") && err.contains(&port.to_string()),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = run(&["status", &format!("etcd://127.0.0.1:{port}/x")]);
    assert_eq!(o.status.code(), Some(68));

    for bad in [
        "etcd://127.0.0.1/x",
        "etcd://127.0.0.1:2379",
        "etcd://127.0.0.1:2379/a/b",
        "etcd://h:1/a\u{1}b",
    ] {
        let o = run(&["run", bad, "true"]);
        assert_eq!(
            o.status.code(),
            Some(64),
            "{bad}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
    }
    let cluster = Cluster::start("cli-status");
    let address = cluster.address("s");
    let o = run(&["run", "--lease", "1.5", &address, "true"]);
    assert_eq!(o.status.code(), Some(64));
    let o = run(&["status", &address]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("holder:         none (free)\n"),
        "{text}"
    );
    let j = status_json(&address);
    assert!(
        j.starts_with('{')
            && j.contains("\"kind\":\"exclusive\"")
            && j.contains("\"holder\":null")
            && j.contains("\"last_token\":0"),
        "{j}"
    );
    // A clean run leaves the record of its token behind.
    let o = run(&["run", &address, "-c", "echo $FAIRLOCK_TOKEN"]);
    let token = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(status_json(&address).contains(&format!("\"last_token\":{token}")));
}

/// The lease of the first waiter, from `fairlock status --json`.
fn first_waiter_lease(address: &str) -> i64 {
    let j = status_json(address);
    let q = j.split("\"queue\":[").nth(1).unwrap();
    let l = q
        .split("\"lease\":")
        .nth(1)
        .unwrap_or_else(|| panic!("{j}"));
    l[..l.find(',').unwrap()].parse().unwrap()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child, not reaped yet.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// A waiting `fairlock run` that is signalled gives its place in line up at once (it used to
/// die at once and leave its key for a whole TTL); one whose lease ended while it waited
/// (revoked, or the process stopped past its TTL) exits 75, not 69 ("lost while the command
/// ran": it never ran) nor 68 (the cluster was reachable). `-w 0` takes a free lock.
#[test]
fn waiters_signalled_revoked_or_stopped_and_zero_waits() {
    let cluster = Cluster::start("cli-waiters");
    let dir = temp("waiters");
    let address = cluster.address("w");
    let o = run(&["run", "-w", "0", &address, "-c", "echo ran"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "-w 0 on a free lock: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n");

    let release = dir.join("release");
    let mut h = holder(&address, "10", &release);
    wait_for("the holder", Duration::from_secs(20), || {
        dir.join("release.token").exists()
    });
    let quiet = |args: &[&str]| {
        fairlock(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };

    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut w = quiet(&["run", "--lease", "10", &address, "-c", "echo ran"]);
        wait_for("queued", Duration::from_secs(10), || waiters(&address) == 1);
        signal(&w, sig);
        let status = w.wait().unwrap();
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        wait_for(
            "the signalled waiter's key to go",
            Duration::from_secs(2),
            || waiters(&address) == 0,
        );
    }

    let w = quiet(&["run", &address, "-c", "echo ran"]);
    wait_for("queued", Duration::from_secs(10), || waiters(&address) == 1);
    let lease = first_waiter_lease(&address);
    cluster
        .etcdctl(&["lease", "revoke", &format!("{lease:x}")])
        .unwrap();
    let o = w.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(75), "revoked waiter: {err}");
    assert!(o.stdout.is_empty() && err.contains("did not run"), "{err}");

    let w = quiet(&["run", "--lease", "2", &address, "-c", "echo ran"]);
    wait_for("queued", Duration::from_secs(10), || waiters(&address) == 1);
    signal(&w, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    signal(&w, libc::SIGCONT);
    let o = w.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(75), "stopped waiter: {err}");
    assert!(o.stdout.is_empty() && err.contains("did not run"), "{err}");

    std::fs::write(&release, "").unwrap();
    assert!(h.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(dir);
}

/// `fairlock` with etcdctl's environment for the secure etcd `e` (`user`: ETCDCTL_USER).
fn with_etcdctl_env(e: &SecureEtcd, user: &str, args: &[&str]) -> Command {
    let mut c = fairlock(args);
    c.env("ETCDCTL_CACERT", &e.files.ca)
        .env("ETCDCTL_CERT", &e.files.cert)
        .env("ETCDCTL_KEY", &e.files.key)
        .env("ETCDCTL_USER", user)
        .env_remove("ETCDCTL_PASSWORD");
    c
}

#[test]
fn etcds_with_etcdctl_s_environment_runs_and_says_what_was_refused() {
    let e = SecureEtcd::start("cli");
    let address = e.address("deploy");
    let root = format!("root:{PASSWORD}");
    let o = with_etcdctl_env(
        &e,
        &root,
        &["run", &address, "--", "sh", "-c", "echo $FAIRLOCK_TOKEN"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let token: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(token > 0);
    let o = with_etcdctl_env(&e, &root, &["status", "--json", &address])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"waiters\":0"));
    // The user and the password in two variables, as etcdctl also takes them.
    let o = with_etcdctl_env(&e, "root", &["run", &address, "--", "true"])
        .env("ETCDCTL_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Each refusal: exit 77 (or 64 for what is missing), one line naming what to fix.
    let wrong_password = with_etcdctl_env(&e, "root:nope", &["run", &address, "--", "true"]);
    let mut wrong_ca = with_etcdctl_env(&e, &root, &["run", &address, "--", "true"]);
    wrong_ca.env("ETCDCTL_CACERT", &e.files.other_ca);
    let mut expired = with_etcdctl_env(&e, &root, &["status", &address]);
    expired
        .env("ETCDCTL_CERT", &e.files.expired_cert)
        .env("ETCDCTL_KEY", &e.files.expired_key);
    let mut no_ca = with_etcdctl_env(&e, &root, &["run", &address, "--", "true"]);
    no_ca.env_remove("ETCDCTL_CACERT");
    let no_password = with_etcdctl_env(&e, "root", &["run", &address, "--", "true"]);
    let mut half = with_etcdctl_env(&e, &root, &["run", &address, "--", "true"]);
    half.env_remove("ETCDCTL_KEY");
    for (what, mut cmd, code, words) in [
        (
            "a wrong password",
            wrong_password,
            77,
            vec!["authentication failed"],
        ),
        (
            "a wrong CA",
            wrong_ca,
            77,
            vec!["not trusted", "ETCDCTL_CACERT"],
        ),
        (
            "an expired certificate",
            expired,
            77,
            vec!["refused our client certificate"],
        ),
        ("no CA", no_ca, 64, vec!["ETCDCTL_CACERT"]),
        ("no password", no_password, 64, vec!["ETCDCTL_PASSWORD"]),
        (
            "a certificate without its key",
            half,
            64,
            vec!["ETCDCTL_KEY"],
        ),
    ] {
        let start = Instant::now();
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{what}: {err}");
        for w in words {
            assert!(err.contains(w), "{what}: {w:?} not in {err}");
        }
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            start.elapsed()
        );
    }
}
