//! A 3-member etcd cluster of the bench's own: `etcd` processes on free 127.0.0.1 ports, data
//! and logs in a temporary directory. Dropping it (also while a panic unwinds) kills the
//! members and removes the directory; the members are started with `PR_SET_PDEATHSIG`, so they
//! die with the bench even if it is killed before it can drop anything.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running cluster.
pub struct Cluster {
    dir: PathBuf,
    clients: Vec<u16>,
    children: Vec<Child>,
}

impl Cluster {
    /// Starts three members in a new directory under `parent` and waits until a write goes
    /// through.
    pub fn start(parent: &Path) -> Cluster {
        let dir = parent.join("etcd");
        std::fs::create_dir_all(&dir).expect("create the cluster's directory");
        // Hold six listeners at once so that the kernel hands out six distinct ports, then
        // let them go for etcd to bind.
        let ports: Vec<u16> = {
            let ls: Vec<TcpListener> = (0..6)
                .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
                .collect();
            ls.iter()
                .map(|l| l.local_addr().expect("local address").port())
                .collect()
        };
        let peer_urls: Vec<String> = (0..3)
            .map(|i| format!("http://127.0.0.1:{}", ports[2 * i + 1]))
            .collect();
        let initial = (0..3)
            .map(|i| format!("e{i}={}", peer_urls[i]))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            dir: dir.clone(),
            clients: (0..3).map(|i| ports[2 * i]).collect(),
            children: Vec::new(),
        };
        for (i, (peer_url, client)) in peer_urls.iter().zip(c.clients.clone()).enumerate() {
            let log = std::fs::File::create(dir.join(format!("e{i}.log"))).expect("member log");
            let client_url = format!("http://127.0.0.1:{client}");
            let mut cmd = Command::new("etcd");
            cmd.args(["--name", &format!("e{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("e{i}.data")))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", peer_url])
                .args(["--initial-advertise-peer-urls", peer_url])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args([
                    "--initial-cluster-token",
                    &format!("etcdbench-{}", std::process::id()),
                ])
                // The same timing as the crate's test clusters (loopback: 50 ms heartbeats).
                .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("dup the log"))
                .stderr(log);
            // SAFETY: runs in the child between fork and exec; prctl is async-signal-safe and
            // touches no memory of the parent's.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            c.children.push(
                cmd.spawn()
                    .expect("start etcd (bash ci/deps.sh installs it)"),
            );
        }
        c.wait_ready(Duration::from_secs(30));
        c
    }

    /// `HOST:PORT` of every member.
    pub fn endpoints(&self) -> Vec<String> {
        self.clients
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// `HOST:PORT,HOST:PORT,HOST:PORT`.
    pub fn joined(&self) -> String {
        self.endpoints().join(",")
    }

    fn wait_ready(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={}", self.joined()))
                .args(["--command-timeout=2s", "put", "etcdbench/ready", "1"])
                .output()
                .expect("run etcdctl (bash ci/deps.sh installs it)");
            if out.status.success() {
                return;
            }
            if start.elapsed() > limit {
                panic!(
                    "the etcd cluster in {} is not ready after {limit:?}: {}",
                    self.dir.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `etcd --version` line of the binary the members run.
    pub fn version() -> String {
        Command::new("etcd")
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("?")
                    .to_owned()
            })
            .unwrap_or_else(|e| format!("etcd --version failed: {e}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
