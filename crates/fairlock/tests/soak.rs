//! Soak: every kind, named locks too, under everything a user's processes legally do at once —
//! `lock`, `try_lock`, `lock_timeout` of zero to 2 ms, leased and unleased handles — while the
//! parent SIGKILLs workers and SIGSTOPs others for up to a few leases. A fenced witness in
//! shared memory checks every grant; at the end the workers stop, and an idle-lock probe must
//! take the lock within 100 ms.
//!
//! The witness, for the grants that exclude (a `FairLock`'s, a named lock's, a reader/writer
//! lock's writes): one word, the newest token that entered and the token inside. A token that
//! enters while a newer one already entered must find its grant lost (`check`); one that
//! enters while an older one is still inside (its holder died or was taken over) must have
//! been told `owner_died`; a holder whose `check` says `Ok` must still be the one inside; one
//! that leaves after a newer one entered must get `LockLost` from `unlock`. So: no two holders,
//! tokens strictly rising, deaths told. For shares (reads, permits: unleased here), per-worker
//! words say who is inside with what: no live writer beside a reader, no more live holders than
//! permits. Reproduce a run with `FL_SEED=<seed printed by the test>`.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::chaos::{Env, Rng, pid_dead, pid_stopped, signal};
use common::{Shm, Worker, role};
use fairlock::{Error, FairLock, FairRwLock, FairSemaphore};

/// How long each kind soaks.
const SOAK: Duration = Duration::from_secs(6);
const WORKERS: usize = 5;
const LEASE: Duration = Duration::from_millis(60);
/// The idle lock must be taken within this once the workers stopped.
const IDLE_WITHIN: Duration = Duration::from_millis(100);
const PERMITS: u64 = 2;
/// How long a leased holder sometimes holds (a third of a lease).
const LONG_HOLD: Duration = Duration::from_millis(20);
/// A worker's "what it holds" word: a share, an exclusive grant (or a write); with
/// `LONG_BIT` while it holds for `LONG_HOLD`.
const SHARE: u64 = 1;
const EXCLUSIVE: u64 = 2;
const LONG_BIT: u64 = 4;

/// Shared words: the witness, stop flag, counters; then per worker id: pid, what it holds.
const WITNESS: usize = 0;
const STOP: usize = 1;
const GRANTS: usize = 2;
const TOLD: usize = 3;
const LOST: usize = 4;
const VIOLATIONS: usize = 5;
const POLLS: usize = 6;
const PER_WORKER: usize = 8;

fn slot(id: usize) -> (usize, usize) {
    (PER_WORKER + 2 * id, PER_WORKER + 2 * id + 1)
}

/// What a worker does: each an exclusive or a shared grant of some kind.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Exclusive,
    Named,
    RwLock,
    Semaphore,
}

impl Kind {
    fn parse(s: &str) -> Kind {
        match s {
            "Exclusive" => Kind::Exclusive,
            "Named" => Kind::Named,
            "RwLock" => Kind::RwLock,
            _ => Kind::Semaphore,
        }
    }
}

/// A grant the witness follows (an exclusive one).
trait Held: Sized {
    fn token(&self) -> u64;
    fn owner_died(&self) -> bool;
    fn check(&self) -> fairlock::Result<()>;
    fn extend(&self, d: Duration) -> fairlock::Result<()>;
    fn unlock(self) -> fairlock::Result<()>;
}

macro_rules! held {
    ($t:ty) => {
        impl Held for $t {
            fn token(&self) -> u64 {
                <$t>::token(self)
            }
            fn owner_died(&self) -> bool {
                <$t>::owner_died(self)
            }
            fn check(&self) -> fairlock::Result<()> {
                <$t>::check(self)
            }
            fn extend(&self, d: Duration) -> fairlock::Result<()> {
                <$t>::extend(self, d)
            }
            fn unlock(self) -> fairlock::Result<()> {
                <$t>::unlock(self)
            }
        }
    };
}
held!(fairlock::LockGuard<'_>);
held!(fairlock::RwLockWriteGuard<'_>);

/// The witness word: the newest token that ever entered (high half), the token inside (low).
fn parts(v: u64) -> (u64, u64) {
    (v >> 32, v & 0xFFFF_FFFF)
}

/// An exclusive grant enters; false if a newer token entered already (we were taken over).
fn enter(shm: &Shm, g: &impl Held) -> bool {
    let mine = g.token();
    let w = shm.atomic(WITNESS);
    let mut cur = w.load(SeqCst);
    loop {
        if parts(cur).0 > mine {
            assert!(
                matches!(g.check(), Err(Error::LockLost { .. })),
                "token {mine} granted after a newer one entered, and check() says Ok"
            );
            shm.atomic(LOST).fetch_add(1, SeqCst);
            return false;
        }
        match w.compare_exchange(cur, (mine << 32) | mine, SeqCst, SeqCst) {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    let inside = parts(cur).1;
    assert!(
        inside == 0 || g.owner_died(),
        "two holders: token {mine} granted without owner_died while token {inside} was inside"
    );
    if g.owner_died() {
        shm.atomic(TOLD).fetch_add(1, SeqCst);
    }
    true
}

/// Works inside: a `check` that says `Ok` means we are still the one inside.
fn work(shm: &Shm, g: &impl Held, rng: &mut Rng, leased: bool, long: bool) -> bool {
    let rounds = 1 + rng.below(3);
    for round in 0..rounds {
        if long && round + 1 == rounds {
            // A long hold: the parent stops a leased one for two leases or more (a waiter
            // takes the grant over and this holder finds out) and kills any other.
            std::thread::sleep(LONG_HOLD);
        }
        let seen = parts(shm.atomic(WITNESS).load(SeqCst)).1;
        match g.check() {
            Ok(()) => assert_eq!(
                seen,
                g.token(),
                "two holders: check() is Ok for token {} but token {seen} is inside",
                g.token()
            ),
            Err(Error::LockLost { .. }) => {
                shm.atomic(LOST).fetch_add(1, SeqCst);
                return false;
            }
            Err(e) => panic!("check: {e}"),
        }
        if leased && rng.below(4) == 0 {
            match g.extend(LEASE) {
                Ok(()) => {}
                Err(Error::LockLost { .. }) => {
                    shm.atomic(LOST).fetch_add(1, SeqCst);
                    return false;
                }
                Err(e) => panic!("extend: {e}"),
            }
        }
        for _ in 0..rng.below(3000) {
            std::hint::spin_loop();
        }
    }
    true
}

/// Leaves: if a newer holder entered meanwhile, `unlock` must say we lost the lock.
fn leave(shm: &Shm, g: impl Held, entered: bool) {
    let mine = g.token();
    let alone = entered
        && shm
            .atomic(WITNESS)
            .fetch_update(SeqCst, SeqCst, |v| {
                (parts(v).1 == mine).then_some(v & !0xFFFF_FFFF)
            })
            .is_ok();
    let r = g.unlock();
    if !alone {
        assert!(
            matches!(r, Err(Error::LockLost { .. })),
            "two holders: unlock of token {mine} said {r:?} although a newer holder entered"
        );
    }
}

/// An exclusive grant, witnessed from entry to release; `long`, held for `LONG_HOLD` too.
fn exclusive(shm: &Shm, g: impl Held, rng: &mut Rng, leased: bool, long: bool) {
    shm.atomic(GRANTS).fetch_add(1, SeqCst);
    let entered = enter(shm, &g);
    if entered {
        work(shm, &g, rng, leased, long);
    }
    leave(shm, g, entered);
}

/// A share (unleased: only death ends it early), witnessed by the per-worker words: nobody
/// alive beside it that it excludes. A process killed drops its beacon while /proc may still
/// show it running for a moment: a conflict is looked at again for up to 2 s.
fn share(shm: &Shm, id: usize, kind: Kind, died: bool, rng: &mut Rng) {
    let (_, what_at) = slot(id);
    let long = rng.below(25) == 0;
    shm.atomic(what_at)
        .store(SHARE | if long { LONG_BIT } else { 0 }, SeqCst);
    shm.atomic(GRANTS).fetch_add(1, SeqCst);
    if died {
        shm.atomic(TOLD).fetch_add(1, SeqCst);
    }
    let limit = Instant::now() + Duration::from_secs(2);
    loop {
        let mut holders = 0;
        for o in (0..WORKERS).filter(|&o| o != id) {
            let (pid_at, what_at) = slot(o);
            let what = shm.atomic(what_at).load(SeqCst);
            let pid = shm.atomic(pid_at).load(SeqCst) as u32;
            if what & !LONG_BIT == SHARE && pid != 0 && !pid_dead(pid) {
                holders += 1;
            }
        }
        let writer_inside = parts(shm.atomic(WITNESS).load(SeqCst)).1 != 0;
        let broken = match kind {
            Kind::Semaphore => holders + 1 > PERMITS,
            _ => writer_inside && !writer_dead(shm),
        };
        if !broken {
            break;
        }
        if Instant::now() >= limit {
            shm.atomic(VIOLATIONS).fetch_add(1, SeqCst);
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if kind == Kind::RwLock {
        // A writer the witness still shows inside is dead (checked above): its death was told
        // to the first grant after it, maybe a reader — the next writer need not be told.
        let _ = shm
            .atomic(WITNESS)
            .fetch_update(SeqCst, SeqCst, |v| Some(v & !0xFFFF_FFFF));
    }
    for _ in 0..rng.below(3000) {
        std::hint::spin_loop();
    }
    if long {
        std::thread::sleep(LONG_HOLD);
    }
    shm.atomic(what_at).store(0, SeqCst);
}

/// Whether the writer the witness shows inside is a dead process's (its slot says so).
fn writer_dead(shm: &Shm) -> bool {
    (0..WORKERS).all(|o| {
        let (pid_at, what_at) = slot(o);
        let pid = shm.atomic(pid_at).load(SeqCst) as u32;
        shm.atomic(what_at).load(SeqCst) & !LONG_BIT != EXCLUSIVE || pid == 0 || pid_dead(pid)
    })
}

/// One attempt, the way a user's process might make it: a wait, a try, or a short timeout.
fn attempt<T>(
    rng: &mut Rng,
    shm: &Shm,
    f: impl FnOnce(Option<Duration>) -> fairlock::Result<T>,
) -> Option<T> {
    let how = match rng.below(4) {
        0 => Some(Duration::ZERO),
        1 => Some(Duration::from_micros(rng.below(2000))),
        2 => Some(Duration::from_micros(rng.below(200))),
        _ => None,
    };
    match f(how) {
        Ok(g) => Some(g),
        Err(Error::Timeout { .. } | Error::WouldBlock { .. }) => {
            shm.atomic(POLLS).fetch_add(1, SeqCst);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn named(path: &str, leased: bool) -> FairLock {
    let mut o = FairLock::options();
    o.name("soak").name_capacity(16).slots(4);
    if leased {
        o.lease(LEASE);
    }
    o.open(path).expect("open the name")
}

fn worker(kind: Kind) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    let id: usize = common::env_parse("FL_ID");
    let path = common::env("FL_LOCK");
    let (pid_at, what_at) = slot(id);
    shm.atomic(what_at).store(0, SeqCst);
    shm.atomic(pid_at)
        .store(u64::from(std::process::id()), SeqCst);
    let mut rng = Rng::from_seed(common::env_parse("FL_WSEED"));
    let leased = leased(kind, id);
    match kind {
        Kind::Exclusive | Kind::Named => {
            let lock = if kind == Kind::Named {
                named(&path, leased)
            } else {
                let mut o = FairLock::options();
                o.slots(4);
                if leased {
                    o.lease(LEASE);
                }
                o.open(&path).expect("open")
            };
            while shm.atomic(STOP).load(SeqCst) == 0 {
                if kind == Kind::Named && rng.below(8) == 0 {
                    // Other names come and go: creations and sweeps of a 16-record file.
                    if let Ok(o) = FairLock::options()
                        .name(format!("churn-{}", rng.below(40)))
                        .name_capacity(16)
                        .open(&path)
                    {
                        drop(o.try_lock());
                    }
                }
                let got = attempt(&mut rng, &shm, |how| match how {
                    None => lock.lock(),
                    Some(d) if d.is_zero() && rng_bit(&shm) => lock.try_lock(),
                    Some(d) => lock.lock_timeout(d),
                });
                if let Some(g) = got {
                    let long = hold(&shm, what_at, &mut rng);
                    exclusive(&shm, g, &mut rng, leased, long);
                    shm.atomic(what_at).store(0, SeqCst);
                }
            }
        }
        Kind::RwLock => {
            let lock = FairLock::options()
                .slots(4)
                .open_rwlock(&path)
                .expect("open");
            while shm.atomic(STOP).load(SeqCst) == 0 {
                if rng.below(3) == 0 {
                    let got = attempt(&mut rng, &shm, |how| match how {
                        None => lock.write(),
                        Some(d) => lock.write_timeout(d),
                    });
                    if let Some(g) = got {
                        let long = hold(&shm, what_at, &mut rng);
                        exclusive(&shm, g, &mut rng, false, long);
                        shm.atomic(what_at).store(0, SeqCst);
                    }
                } else {
                    let got = attempt(&mut rng, &shm, |how| match how {
                        None => lock.read(),
                        Some(d) => lock.read_timeout(d),
                    });
                    if let Some(g) = got {
                        share(&shm, id, kind, g.owner_died(), &mut rng);
                        drop(g);
                    }
                }
            }
        }
        Kind::Semaphore => {
            let sem = FairLock::options()
                .slots(8)
                .open_semaphore(&path, PERMITS as u32)
                .expect("open");
            while shm.atomic(STOP).load(SeqCst) == 0 {
                let got = attempt(&mut rng, &shm, |how| match how {
                    None => sem.acquire(),
                    Some(d) => sem.acquire_timeout(d),
                });
                if let Some(p) = got {
                    share(&shm, id, kind, p.owner_died(), &mut rng);
                    drop(p);
                }
            }
        }
    }
}

/// Half the workers of the exclusive kinds hold leases.
fn leased(kind: Kind, id: usize) -> bool {
    matches!(kind, Kind::Exclusive | Kind::Named) && id.is_multiple_of(2)
}

/// An exclusive grant begins: says so in the worker's word; one in 25 is held long.
fn hold(shm: &Shm, what_at: usize, rng: &mut Rng) -> bool {
    let long = rng.below(25) == 0;
    shm.atomic(what_at)
        .store(EXCLUSIVE | if long { LONG_BIT } else { 0 }, SeqCst);
    long
}

/// A cheap coin from the shared poll count (to mix `try_lock` with zero timeouts).
fn rng_bit(shm: &Shm) -> bool {
    shm.read(POLLS).is_multiple_of(2)
}

/// The idle probe: the whole lock, within `IDLE_WITHIN`, once every worker stopped.
fn probe(kind: Kind, path: &std::path::Path) -> Duration {
    let started = Instant::now();
    match kind {
        Kind::Exclusive => drop(
            FairLock::open(path)
                .unwrap()
                .lock_timeout(IDLE_WITHIN)
                .expect("idle lock"),
        ),
        Kind::Named => drop(
            named(path.to_str().unwrap(), false)
                .lock_timeout(IDLE_WITHIN)
                .expect("idle name"),
        ),
        Kind::RwLock => drop(
            FairRwLock::open(path)
                .unwrap()
                .write_timeout(IDLE_WITHIN)
                .expect("idle rwlock"),
        ),
        Kind::Semaphore => {
            let s = FairSemaphore::open(path, PERMITS as u32).unwrap();
            let all: Vec<_> = (0..PERMITS)
                .map(|_| s.acquire_timeout(IDLE_WITHIN).expect("every permit, idle"))
                .collect();
            drop(all);
        }
    }
    started.elapsed()
}

fn soak(kind: Kind, rng: &mut Rng) {
    let test = "soak_every_kind_under_kills_stops_and_polls";
    let (mut env, shm) = Env::new(test, test, PER_WORKER + 2 * WORKERS);
    let spawn = |env: &mut Env, id: usize, rng: &mut Rng| -> Worker {
        env.spawn(
            &format!("{kind:?}"),
            &[
                ("FL_ID", id.to_string()),
                ("FL_WSEED", rng.next().to_string()),
            ],
        )
    };
    let mut workers: Vec<Worker> = (0..WORKERS).map(|id| spawn(&mut env, id, rng)).collect();
    let mut stopped: Vec<Option<Instant>> = vec![None; WORKERS];
    let (mut kills, mut stops, mut held_stops, mut held_kills) = (0, 0, 0, 0);
    let started = Instant::now();
    while started.elapsed() < SOAK {
        std::thread::sleep(Duration::from_millis(5 + rng.below(25)));
        for (id, w) in workers.iter_mut().enumerate() {
            assert!(!w.poll(), "{kind:?}: worker {id} exited:\n{}", w.stderr());
            if stopped[id].is_some_and(|t| Instant::now() >= t) {
                signal(w.pid(), libc::SIGCONT);
                stopped[id] = None;
            }
        }
        // Every other time, a leased holder holding long is stopped for two or three leases
        // (taken over); any other long holder is killed (its death told).
        let long = (0..WORKERS)
            .find(|&id| stopped[id].is_none() && shm.read(slot(id).1) & LONG_BIT != 0)
            .filter(|_| rng.below(2) == 0);
        if let Some(id) = long.filter(|&id| leased(kind, id)) {
            signal(workers[id].pid(), libc::SIGSTOP);
            stopped[id] = Some(Instant::now() + LEASE * (2 + rng.below(2)) as u32);
            held_stops += 1;
            continue;
        }
        held_kills += usize::from(long.is_some());
        let id = long.unwrap_or_else(|| rng.below(WORKERS as u64) as usize);
        if stopped[id].is_some() {
            continue;
        }
        if long.is_none() && rng.below(3) == 0 {
            signal(workers[id].pid(), libc::SIGSTOP);
            stopped[id] = Some(Instant::now() + LEASE * (1 + rng.below(3)) as u32);
            stops += 1;
        } else {
            workers[id].child.kill().expect("kill");
            workers[id].child.wait().expect("reap");
            workers[id].status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
            kills += 1;
            shm.atomic(slot(id).1).store(0, SeqCst);
            workers[id] = spawn(&mut env, id, rng);
        }
    }
    // Stop: every stopped worker goes on, every worker finishes what it does and exits.
    shm.atomic(STOP).store(1, SeqCst);
    for (id, w) in workers.iter().enumerate() {
        if stopped[id].is_some() || pid_stopped(w.pid()) {
            signal(w.pid(), libc::SIGCONT);
        }
    }
    let until = Instant::now() + Duration::from_secs(20);
    while workers.iter_mut().any(|w| !w.poll()) {
        if Instant::now() >= until {
            let raw = std::fs::read(env.path()).unwrap_or_default();
            let u = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
            let so = u32::from_le_bytes(raw[36..40].try_into().unwrap()) as usize;
            let n = u32::from_le_bytes(raw[24..28].try_into().unwrap()) as usize;
            let slots: Vec<String> = (0..n)
                .map(|i| {
                    let w = u(so + 64 * i);
                    format!(
                        "[{i}: lap {} p {} st {} died {} shared {} | given_up {:#x} lapped {:#x}]",
                        w >> 20,
                        (w >> 8) & 0xfff,
                        w & 0xf,
                        (w >> 4) & 1,
                        (w >> 6) & 1,
                        u(so + 64 * i + 40),
                        u(so + 64 * i + 56)
                    )
                })
                .collect();
            panic!(
                "{kind:?}: workers still running after the stop: word {:#x} head {} front {} deaths {} told {}; {}; {:?}",
                u(64),
                u(128),
                u(184),
                u(168),
                u(176),
                slots.join(" "),
                fairlock::inspect(env.path())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = probe(kind, &env.path());
    eprintln!(
        "[soak {kind:?}] {kills} kills, {stops} stops, {held_stops} long holders stopped, {held_kills} killed, {} grants, {} told owner_died, {} taken over, {} polls timed out; idle lock taken in {took:?}",
        shm.read(GRANTS),
        shm.read(TOLD),
        shm.read(LOST),
        shm.read(POLLS),
    );
    assert_eq!(
        shm.read(VIOLATIONS),
        0,
        "{kind:?}: a witness saw a holder it must not"
    );
    assert!(
        shm.read(GRANTS) > 100 && shm.read(POLLS) > 100,
        "{kind:?}: too little happened"
    );
    if held_kills >= 3 {
        assert!(
            shm.read(TOLD) > 0,
            "{kind:?}: {held_kills} holders killed, no death was ever told"
        );
    }
    if held_stops >= 3 {
        assert!(
            shm.read(LOST) > 0,
            "{kind:?}: {held_stops} leased holders stopped for two leases, none found it lost"
        );
    }
    assert!(took < IDLE_WITHIN, "{kind:?}: the idle lock took {took:?}");
}

#[test]
fn soak_every_kind_under_kills_stops_and_polls() {
    if let Some(r) = role() {
        worker(Kind::parse(&r));
        return;
    }
    let mut rng = Rng::new("soak");
    for kind in [Kind::Exclusive, Kind::Named, Kind::RwLock, Kind::Semaphore] {
        soak(kind, &mut rng);
    }
}
