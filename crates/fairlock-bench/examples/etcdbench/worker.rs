//! The client side: one client per process. `etcdbench worker …` runs fairlock-etcd or the
//! local file lock in a loop; `etcdbench stamp …` is the command `etcdctl lock` runs while it
//! holds the lock.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;

use crate::stats::{Hist, Shm, now_ns, word};

/// What one client saw inside the window.
#[derive(Default)]
struct Seen {
    grants: u64,
    wait: Hist,
    handoff: Hist,
}

/// The critical section: checks and stamps the shared page at a grant (`t0`: lock called,
/// `t1`: lock returned). `token: None` skips the FIFO check.
fn granted(
    shm: &Shm,
    (start, end): (u64, u64),
    t0: u64,
    t1: u64,
    token: Option<u64>,
) -> Option<(u64, Option<u64>)> {
    if shm.at(word::INSIDE).swap(1, SeqCst) == 1 {
        shm.at(word::OVERLAPS).fetch_add(1, SeqCst);
    }
    if let Some(tok) = token {
        let last = shm.at(word::LAST_TOKEN).swap(tok, SeqCst);
        if last != 0 && tok <= last {
            shm.at(word::OUT_OF_ORDER).fetch_add(1, SeqCst);
        }
    }
    let last_release = shm.at(word::LAST_RELEASE).load(SeqCst);
    let handoff = (last_release != 0 && last_release <= t1).then(|| t1 - last_release);
    (start..end).contains(&t1).then_some((t1 - t0, handoff))
}

/// The end of the critical section: the stamp the next holder measures its hand-off from,
/// taken just before unlock is called.
fn releasing(shm: &Shm) {
    shm.at(word::INSIDE).store(0, SeqCst);
    shm.at(word::LAST_RELEASE).store(now_ns(), SeqCst);
}

impl Seen {
    fn record(&mut self, r: Option<(u64, Option<u64>)>) {
        if let Some((wait, handoff)) = r {
            self.grants += 1;
            self.wait.add(wait);
            if let Some(h) = handoff {
                self.handoff.add(h);
            }
        }
    }

    fn write(&self, out: &Path, client: usize) {
        let text = format!(
            "client {client}\ngrants {}\nwait {}\nhandoff {}\n",
            self.grants,
            self.wait.serialize(),
            self.handoff.serialize()
        );
        std::fs::write(out, text).expect("write the samples");
    }
}

/// Says `ready`, waits for the driver's line on stdin, returns the window.
fn ready_and_wait(shm: &Shm) -> (u64, u64) {
    println!("ready");
    std::io::stdout().flush().expect("flush stdout");
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .expect("read the start line");
    (
        shm.at(word::START).load(SeqCst),
        shm.at(word::END).load(SeqCst),
    )
}

/// `worker etcd CLIENT SHM OUT ENDPOINTS NAME` or `worker local CLIENT SHM OUT PATH`.
pub fn worker(args: &[String]) {
    let [kind, client, shm, out, rest @ ..] = args else {
        panic!("usage: etcdbench worker etcd|local CLIENT SHM OUT (ENDPOINTS NAME | PATH)");
    };
    let client: usize = client.parse().expect("client number");
    let shm = Shm::open(Path::new(shm));
    let mut seen = Seen::default();
    match (kind.as_str(), rest) {
        ("etcd", [endpoints, name]) => {
            let endpoints: Vec<&str> = endpoints.split(',').collect();
            let lock = fairlock_etcd::EtcdLock::connect(&endpoints, name)
                .unwrap_or_else(|e| panic!("client {client}: connect: {e}"));
            let window = ready_and_wait(&shm);
            loop {
                let t0 = now_ns();
                if t0 >= window.1 {
                    break;
                }
                let g = lock
                    .lock()
                    .unwrap_or_else(|e| panic!("client {client}: lock: {e}"));
                let t1 = now_ns();
                seen.record(granted(&shm, window, t0, t1, Some(g.token())));
                releasing(&shm);
                g.unlock()
                    .unwrap_or_else(|e| panic!("client {client}: unlock: {e}"));
            }
        }
        ("local", [path]) => {
            let lock = fairlock::FairLock::open(path)
                .unwrap_or_else(|e| panic!("client {client}: open: {e}"));
            let window = ready_and_wait(&shm);
            loop {
                let t0 = now_ns();
                if t0 >= window.1 {
                    break;
                }
                let g = lock
                    .lock()
                    .unwrap_or_else(|e| panic!("client {client}: lock: {e}"));
                let t1 = now_ns();
                seen.record(granted(&shm, window, t0, t1, Some(g.token())));
                releasing(&shm);
                g.unlock()
                    .unwrap_or_else(|e| panic!("client {client}: unlock: {e}"));
            }
        }
        _ => panic!("worker {kind} {rest:?}: unknown kind or arguments"),
    }
    seen.write(Path::new(out), client);
}

/// `stamp SHM OUT`: run by `etcdctl lock NAME -- etcdbench stamp …` while etcdctl holds the
/// lock. Appends `S grant wait handoff` to OUT, with the grant taken as this process's start
/// and the wait counted from `ETCDBENCH_T0` (when the driver spawned etcdctl; etcdctl passes
/// its environment on). The release stamp is this command's end: etcdctl unlocks after it.
pub fn stamp(args: &[String]) {
    let t1 = now_ns();
    let [shm, out] = args else {
        panic!("usage: etcdbench stamp SHM OUT");
    };
    let t0: u64 = std::env::var("ETCDBENCH_T0")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("ETCDBENCH_T0 in the environment");
    let shm = Shm::open(Path::new(shm));
    // etcdctl passes only the mutex's header revision (ETCD_LOCK_REV), which grows with
    // every grant whatever the order: no FIFO check here.
    let r = granted(&shm, (0, u64::MAX), t0, t1, None);
    let (wait, handoff) = r.expect("inside the open window");
    let line = format!(
        "S {t1} {wait} {}\n",
        handoff.map_or("-".to_owned(), |h| h.to_string())
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(out)
        .expect("open the samples file");
    f.write_all(line.as_bytes()).expect("append a sample");
    releasing(&shm);
}
