//! A real 3-member etcd cluster for one test: `etcd` processes on 127.0.0.1 ports of their
//! own, data in a temporary directory, killed (and the directory removed) when dropped.
//! Members can be killed and restarted, for the fault tests.
//!
//! Needs `etcd` and `etcdctl` on PATH (`ci/test.sh` installs Debian's `etcd-server` and
//! `etcd-client` when they are missing). Shared with the CLI's tests by `#[path]`.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A running 3-member cluster.
pub struct Cluster {
    dir: PathBuf,
    members: Vec<Member>,
}

/// A fresh directory for a test's etcd, `fairlock-etcd-{what}-PID-NANOS` in the temp dir.
pub fn fresh_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fairlock-etcd-{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts an etcd member that dies with the test thread that started it, even if the test
/// process is killed before anything drops it.
pub fn spawn_member(cmd: &mut Command) -> Child {
    // SAFETY: prctl is async-signal-safe; this runs in the child between fork and exec and
    // touches no memory of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().expect("start etcd (is etcd-server installed?)")
}

/// Waits until `put` (an etcdctl write) succeeds: etcd in `dir` answers writes.
pub fn wait_writable(dir: &Path, limit: Duration, put: impl Fn() -> Result<String, String>) {
    let start = Instant::now();
    loop {
        match put() {
            Ok(_) => return,
            Err(e) if start.elapsed() > limit => {
                panic!("etcd in {} not ready after {limit:?}: {e}", dir.display())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Ports nobody listens on now (the kernel's choice), distinct.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl Cluster {
    /// Starts three members and waits until the cluster answers writes.
    pub fn start(tag: &str) -> Cluster {
        let dir = fresh_dir(tag);
        let ports = free_ports(6);
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: ports[2 * i],
                peer: ports[2 * i + 1],
                child: None,
            })
            .collect();
        let mut c = Cluster { dir, members };
        for i in 0..3 {
            c.spawn(i);
        }
        c.wait_ready(Duration::from_secs(30));
        c
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial_cluster();
        let dir = self.dir.clone();
        let m = &mut self.members[i];
        let data = dir.join(&m.name);
        let log = std::fs::File::create(dir.join(format!("{}.log", m.name))).unwrap();
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(format!("http://127.0.0.1:{}", m.client))
            .arg("--advertise-client-urls")
            .arg(format!("http://127.0.0.1:{}", m.client))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-cluster")
            .arg(initial)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(dir.file_name().unwrap())
            .arg("--heartbeat-interval")
            .arg("50")
            .arg("--election-timeout")
            .arg("500")
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        m.child = Some(spawn_member(&mut cmd));
    }

    /// `HOST:PORT` of every member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect()
    }

    /// `HOST:PORT,HOST:PORT,HOST:PORT`.
    pub fn joined(&self) -> String {
        self.endpoints().join(",")
    }

    /// `etcd://…/NAME`.
    pub fn address(&self, name: &str) -> String {
        format!("etcd://{}/{name}", self.joined())
    }

    /// The directory of the members' data and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `etcdctl` against the cluster; its stdout, or its stderr as the error.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.joined()))
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

    /// Waits until a write goes through (a leader and a quorum).
    pub fn wait_ready(&self, limit: Duration) {
        wait_writable(&self.dir, limit, || {
            self.etcdctl(&["put", "fairlock-test/ready", "1"])
        });
    }

    /// Waits until member `i` itself serves a linearizable read (`etcdctl endpoint health`
    /// against it alone): it runs, has caught up and is in touch with a leader. A restarted
    /// member that is only running is not yet part of a quorum; killing another member before
    /// it is would leave the cluster without one for a moment.
    pub fn wait_member_ready(&self, i: usize, limit: Duration) {
        let start = Instant::now();
        let endpoint = format!("127.0.0.1:{}", self.members[i].client);
        loop {
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={endpoint}"))
                .arg("--command-timeout=2s")
                .args(["endpoint", "health"])
                .output()
                .expect("run etcdctl (is etcd-client installed?)");
            if out.status.success() {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "etcd member {i} ({endpoint}) not healthy after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The index of the member that is the leader now (as `etcdctl endpoint status` says).
    pub fn leader(&self) -> usize {
        for (i, m) in self.members.iter().enumerate() {
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints=127.0.0.1:{}", m.client))
                .arg("--command-timeout=2s")
                .args(["endpoint", "status"])
                .output()
                .expect("run etcdctl");
            // "ENDPOINT, ID, VERSION, DB SIZE, IS LEADER, IS LEARNER, ..."
            let text = String::from_utf8_lossy(&out.stdout);
            if text.split(", ").nth(4) == Some("true") {
                return i;
            }
        }
        panic!("no member of {} says it leads", self.dir.display());
    }

    /// SIGSTOPs member `i`: its connections stay open and its answers never come (a hung
    /// machine, unlike a killed one whose connections are refused at once).
    pub fn stop(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
    }

    /// SIGCONTs member `i` after [`Cluster::stop`].
    pub fn cont(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
    }

    fn signal(&self, i: usize, sig: libc::c_int) {
        let c = self.members[i].child.as_ref().expect("member is running");
        // SAFETY: kill(2) on our own child process, which has not been reaped.
        assert_eq!(unsafe { libc::kill(c.id() as libc::pid_t, sig) }, 0);
    }

    /// Restarts member `i` on its data directory.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].child.is_some() {
                self.cont(i); // a stopped member dies only once continued
            }
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
