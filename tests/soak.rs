//! Soak: every kind, named locks too, under everything a user's processes legally do at once —
//! `lock`, `try_lock`, `lock_timeout` of zero to 2 ms, leased and unleased handles — while the
//! parent SIGKILLs workers and SIGSTOPs others for up to a few leases (and stops leased holders
//! that hold long for two or three, so that they are taken over). A fenced witness in shared
//! memory checks every grant; at the end the workers stop, and an idle-lock probe must take the
//! lock within 100 ms.
//!
//! The witness, for the grants that exclude (a `FairLock`'s, a named lock's, a reader/writer
//! lock's writes): one word, the newest token that entered and the token inside. A token that
//! enters while a newer one already entered must find its grant lost (`check`); one that
//! enters while an older one is still inside (its holder died or was taken over) must have
//! been told `owner_died`; a holder whose `check` says `Ok` must still be the one inside; one
//! that leaves after a newer one entered must get `LockLost` from `unlock`. So: no two holders,
//! tokens strictly rising, deaths told.
//!
//! For shares (reads, permits) and against them, per-worker words say who holds what: a reader
//! finds no writer, a writer no reader, a permit holder no more than the permits, unless the
//! other is dead (the parent marks a worker it kills before the signal), past the earliest its
//! lease could end (each grant stores a bound below its lease deadline), or this grant itself
//! was lost (`check`). Each stores its word before it looks (`SeqCst`), and clears it before it
//! releases: of two holders that overlap, at least one sees the other.
//!
//! Reproduce a run with `FL_SEED=<seed printed by the test>`; `FL_SOAK_KINDS=RwLock,Semaphore`
//! soaks only those kinds.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::chaos::{Env, Rng, mono_ns, pid_dead, pid_stopped, signal};
use common::witness::{self, Entry, parts};
use common::{Shm, Worker, role};
use fairlock::{Error, FairLock, FairRwLock, FairSemaphore};

/// How long each kind soaks.
const SOAK: Duration = Duration::from_secs(6);
const WORKERS: usize = 5;
const LEASE: Duration = Duration::from_millis(60);
/// Below a lease deadline as a grant reckons it: leases count whole milliseconds.
const LEASE_MARGIN: Duration = Duration::from_millis(2);
/// The idle lock must be taken within this once the workers stopped.
const IDLE_WITHIN: Duration = Duration::from_millis(100);
const PERMITS: u64 = 2;
/// How long a holder sometimes holds (a third of a lease).
const LONG_HOLD: Duration = Duration::from_millis(20);
/// A worker's "what it holds" word: a share, an exclusive grant (or a write); with
/// `LONG_BIT` while it holds for `LONG_HOLD`.
const SHARE: u64 = 1;
const EXCLUSIVE: u64 = 2;
const LONG_BIT: u64 = 4;

/// Shared words: the witness, stop flag, counters; then per worker id the words of `Words`.
const WITNESS: usize = 0;
const STOP: usize = 1;
const GRANTS: usize = 2;
const TOLD: usize = 3;
const LOST: usize = 4;
const POLLS: usize = 5;
const PER_WORKER: usize = 8;
const WORDS_PER_WORKER: usize = 5;

/// Where worker `id`'s words are: its pid; what it holds; the earliest its lease can end
/// (`CLOCK_MONOTONIC` ns; 0: no lease); the pid the parent is killing there; the token of
/// what it holds.
struct Words {
    pid: usize,
    what: usize,
    lease_floor: usize,
    doomed: usize,
    token: usize,
}

fn words(id: usize) -> Words {
    let at = PER_WORKER + WORDS_PER_WORKER * id;
    Words {
        pid: at,
        what: at + 1,
        lease_floor: at + 2,
        doomed: at + 3,
        token: at + 4,
    }
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

/// A grant the witness follows.
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
held!(fairlock::RwLockReadGuard<'_>);
held!(fairlock::SemaphorePermit<'_>);

/// Who this worker is, and what it holds now.
struct Me<'a> {
    shm: &'a Shm,
    id: usize,
    kind: Kind,
    leased: bool,
}

impl Me<'_> {
    /// A grant begins (`attempted`: `mono_ns()` before the call that returned it): its lease's
    /// floor, then what it holds; one grant in 25 is held long.
    fn hold(&self, g: &impl Held, what: u64, attempted: u64, rng: &mut Rng) -> bool {
        let w = words(self.id);
        self.shm.atomic(w.token).store(g.token(), SeqCst);
        let floor = attempted + (LEASE - LEASE_MARGIN).as_nanos() as u64;
        self.shm
            .atomic(w.lease_floor)
            .store(if self.leased { floor } else { 0 }, SeqCst);
        let long = rng.below(25) == 0;
        self.shm
            .atomic(w.what)
            .store(what | if long { LONG_BIT } else { 0 }, SeqCst);
        long
    }

    /// The grant ends: cleared before the release, so that no later grant sees it.
    fn clear(&self) {
        let w = words(self.id);
        self.shm.atomic(w.what).store(0, SeqCst);
        self.shm.atomic(w.lease_floor).store(0, SeqCst);
    }

    /// Extends a leased grant; false if it was lost. The floor moves only once the extension
    /// is known to have been made.
    fn extend(&self, g: &impl Held) -> bool {
        let before = mono_ns();
        match g.extend(LEASE) {
            Ok(()) => {
                let floor = before + (LEASE - LEASE_MARGIN).as_nanos() as u64;
                self.shm
                    .atomic(words(self.id).lease_floor)
                    .store(floor, SeqCst);
                true
            }
            Err(Error::LockLost { .. }) => {
                self.shm.atomic(LOST).fetch_add(1, SeqCst);
                false
            }
            Err(e) => panic!("extend: {e}"),
        }
    }

    /// The other workers that hold `what` and may still (alive, marked by no kill, within
    /// their lease), as `(worker, token)`: each read as the token, its word, the token again
    /// (the same token twice: the word was that grant's).
    fn others_holding(&self, what: u64) -> Vec<(usize, u64)> {
        (0..WORKERS)
            .filter(|&o| o != self.id)
            .filter_map(|o| {
                let w = words(o);
                let token = self.shm.atomic(w.token).load(SeqCst);
                let held = self.shm.atomic(w.what).load(SeqCst) & !LONG_BIT;
                let floor = self.shm.atomic(w.lease_floor).load(SeqCst);
                let stable = self.shm.atomic(w.token).load(SeqCst) == token;
                let pid = self.shm.atomic(w.pid).load(SeqCst) as u32;
                let doomed = self.shm.atomic(w.doomed).load(SeqCst) as u32;
                let may_hold = stable
                    && held == what
                    && pid != 0
                    && pid != doomed
                    && (floor == 0 || mono_ns() < floor)
                    && !pid_dead(pid);
                may_hold.then_some((o, token))
            })
            .collect()
    }

    /// No other grant that this one excludes may still hold, unless this one was lost. Two
    /// looks: a grant seen in both held all along between them, so the ones seen twice held at
    /// one moment (one look could count a grant that ended and the one that followed it).
    fn look_around(&self, g: &impl Held, mine: u64) {
        let (what, most) = match (self.kind, mine) {
            (Kind::RwLock, SHARE) => (EXCLUSIVE, 0),
            (Kind::RwLock, _) => (SHARE, 0),
            (Kind::Semaphore, _) => (SHARE, PERMITS - 1),
            _ => return,
        };
        let first = self.others_holding(what);
        if first.len() as u64 <= most {
            return;
        }
        let second = self.others_holding(what);
        let both: Vec<_> = first.iter().filter(|x| second.contains(x)).collect();
        if both.len() as u64 <= most {
            return;
        }
        match g.check() {
            Err(Error::LockLost { .. }) => {}
            r => panic!(
                "two holders: {:?} grant {} of worker {} (leased: {}, check: {r:?}) beside {both:?} (worker, token)",
                self.kind,
                g.token(),
                self.id,
                self.leased
            ),
        }
    }
}

/// An exclusive grant enters (see `common::witness`): false if it was taken over before it
/// got here.
fn enter(shm: &Shm, g: &impl Held) -> bool {
    let told = g.owner_died();
    match witness::enter(shm.atomic(WITNESS), g.token(), told, || {
        matches!(g.check(), Err(Error::LockLost { .. }))
    }) {
        Entry::Lost => {
            shm.atomic(LOST).fetch_add(1, SeqCst);
            false
        }
        Entry::Inside { .. } => {
            if told {
                shm.atomic(TOLD).fetch_add(1, SeqCst);
            }
            true
        }
    }
}

/// Works inside an exclusive grant: a `check` that says `Ok` means we are still the one
/// inside. A long hold sleeps: the parent stops a leased holder then for two leases or more (a
/// waiter takes the grant over and this holder finds out) and kills any other.
fn work(me: &Me<'_>, g: &impl Held, rng: &mut Rng, long: bool) {
    let rounds = 1 + rng.below(3);
    for round in 0..rounds {
        if long && round + 1 == rounds {
            std::thread::sleep(LONG_HOLD);
        }
        let seen = parts(me.shm.atomic(WITNESS).load(SeqCst)).1;
        match g.check() {
            Ok(()) => assert_eq!(
                seen,
                g.token(),
                "two holders: check() is Ok for token {} but token {seen} is inside",
                g.token()
            ),
            Err(Error::LockLost { .. }) => {
                me.shm.atomic(LOST).fetch_add(1, SeqCst);
                return;
            }
            Err(e) => panic!("check: {e}"),
        }
        if me.leased && rng.below(4) == 0 && !me.extend(g) {
            return;
        }
        for _ in 0..rng.below(3000) {
            std::hint::spin_loop();
        }
    }
}

/// Leaves: if a newer holder entered meanwhile, `unlock` must say we lost the lock.
fn leave(me: &Me<'_>, g: impl Held, entered: bool) {
    let mine = g.token();
    let alone = witness::leave(me.shm.atomic(WITNESS), mine, entered);
    me.clear();
    let r = g.unlock();
    if !alone {
        assert!(
            matches!(r, Err(Error::LockLost { .. })),
            "two holders: unlock of token {mine} said {r:?} although a newer holder entered"
        );
    }
}

/// An exclusive grant (a write, on a reader/writer lock), witnessed from entry to release.
fn exclusive(me: &Me<'_>, g: impl Held, attempted: u64, rng: &mut Rng) {
    let long = me.hold(&g, EXCLUSIVE, attempted, rng);
    me.shm.atomic(GRANTS).fetch_add(1, SeqCst);
    let entered = enter(me.shm, &g);
    if entered {
        me.look_around(&g, EXCLUSIVE);
        work(me, &g, rng, long);
    }
    leave(me, g, entered);
}

/// A share (a read, a permit), witnessed by the per-worker words from entry to release.
fn share(me: &Me<'_>, g: impl Held, attempted: u64, rng: &mut Rng) {
    let long = me.hold(&g, SHARE, attempted, rng);
    me.shm.atomic(GRANTS).fetch_add(1, SeqCst);
    if g.owner_died() {
        me.shm.atomic(TOLD).fetch_add(1, SeqCst);
    }
    me.look_around(&g, SHARE);
    if me.kind == Kind::RwLock {
        // A writer the witness still shows inside is dead or was taken over (looked at
        // above): the first grant after it was told, maybe a reader — the next writer need not
        // be told.
        let _ = me
            .shm
            .atomic(WITNESS)
            .fetch_update(SeqCst, SeqCst, |v| Some(v & !0xFFFF_FFFF));
    }
    let mut lost = false;
    if me.leased && rng.below(4) == 0 {
        lost = !me.extend(&g);
    }
    for _ in 0..rng.below(3000) {
        std::hint::spin_loop();
    }
    if long {
        std::thread::sleep(LONG_HOLD);
    }
    if !lost && me.leased {
        match g.check() {
            Ok(()) => {}
            Err(Error::LockLost { .. }) => {
                me.shm.atomic(LOST).fetch_add(1, SeqCst);
                lost = true;
            }
            Err(e) => panic!("check: {e}"),
        }
    }
    me.clear();
    match g.unlock() {
        Ok(()) => assert!(!lost, "unlock of a lost share said Ok"),
        Err(Error::LockLost { .. }) if me.leased => {}
        Err(e) => panic!("unlock of a share: {e}"),
    }
}

/// One attempt, the way a user's process might make it: a wait, a try, or a short timeout.
/// With `mono_ns()` just before it.
fn attempt<T>(
    rng: &mut Rng,
    shm: &Shm,
    f: impl FnOnce(Option<Duration>) -> fairlock::Result<T>,
) -> Option<(T, u64)> {
    let how = match rng.below(4) {
        0 => Some(Duration::ZERO),
        1 => Some(Duration::from_micros(rng.below(2000))),
        2 => Some(Duration::from_micros(rng.below(200))),
        _ => None,
    };
    let attempted = mono_ns();
    match f(how) {
        Ok(g) => Some((g, attempted)),
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

/// Half the workers hold leases (every kind).
fn leased(id: usize) -> bool {
    id.is_multiple_of(2)
}

fn worker(kind: Kind) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    let id: usize = common::env_parse("FL_ID");
    let path = common::env("FL_LOCK");
    let me = Me {
        shm: &shm,
        id,
        kind,
        leased: leased(id),
    };
    me.clear();
    shm.atomic(words(id).pid)
        .store(u64::from(std::process::id()), SeqCst);
    let mut rng = Rng::from_seed(common::env_parse("FL_WSEED"));
    let mut options = FairLock::options();
    options.slots(4);
    if me.leased {
        options.lease(LEASE);
    }
    match kind {
        Kind::Exclusive | Kind::Named => {
            let lock = if kind == Kind::Named {
                named(&path, me.leased)
            } else {
                options.open(&path).expect("open")
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
                if let Some((g, attempted)) = got {
                    exclusive(&me, g, attempted, &mut rng);
                }
            }
        }
        Kind::RwLock => {
            let lock = options.open_rwlock(&path).expect("open");
            while shm.atomic(STOP).load(SeqCst) == 0 {
                if rng.below(3) == 0 {
                    let got = attempt(&mut rng, &shm, |how| match how {
                        None => lock.write(),
                        Some(d) => lock.write_timeout(d),
                    });
                    if let Some((g, attempted)) = got {
                        exclusive(&me, g, attempted, &mut rng);
                    }
                } else {
                    let got = attempt(&mut rng, &shm, |how| match how {
                        None => lock.read(),
                        Some(d) => lock.read_timeout(d),
                    });
                    if let Some((g, attempted)) = got {
                        share(&me, g, attempted, &mut rng);
                    }
                }
            }
        }
        Kind::Semaphore => {
            options.slots(8);
            let sem = options.open_semaphore(&path, PERMITS as u32).expect("open");
            while shm.atomic(STOP).load(SeqCst) == 0 {
                let got = attempt(&mut rng, &shm, |how| match how {
                    None => sem.acquire(),
                    Some(d) => sem.acquire_timeout(d),
                });
                if let Some((p, attempted)) = got {
                    share(&me, p, attempted, &mut rng);
                }
            }
        }
    }
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
    let (mut env, shm) = Env::new(test, test, PER_WORKER + WORDS_PER_WORKER * WORKERS);
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
        // (taken over); an unleased one is killed (its death told).
        let long = (0..WORKERS)
            .find(|&id| stopped[id].is_none() && shm.read(words(id).what) & LONG_BIT != 0)
            .filter(|_| rng.below(2) == 0);
        if let Some(id) = long.filter(|&id| leased(id)) {
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
            // Marked first: its grant counts as gone from the signal on (the kernel drops its
            // locks before /proc shows it dead).
            let w = words(id);
            shm.atomic(w.doomed)
                .store(u64::from(workers[id].pid()), SeqCst);
            workers[id].child.kill().expect("kill");
            workers[id].child.wait().expect("reap");
            workers[id].status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
            kills += 1;
            shm.atomic(w.what).store(0, SeqCst);
            shm.atomic(w.lease_floor).store(0, SeqCst);
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
    for (id, w) in workers.iter_mut().enumerate() {
        assert!(
            w.status.is_some_and(|s| s.success()),
            "{kind:?}: worker {id} failed:\n{}",
            w.stderr()
        );
    }
    let took = probe(kind, &env.path());
    eprintln!(
        "[soak {kind:?}] {kills} kills, {stops} stops, {held_stops} long holders stopped, {held_kills} killed, {} grants, {} told owner_died, {} taken over, {} polls timed out; idle lock taken in {took:?}",
        shm.read(GRANTS),
        shm.read(TOLD),
        shm.read(LOST),
        shm.read(POLLS),
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
    let only = std::env::var("FL_SOAK_KINDS").unwrap_or_default();
    for kind in [Kind::Exclusive, Kind::Named, Kind::RwLock, Kind::Semaphore] {
        if only.is_empty() || only.split(',').any(|k| Kind::parse(k) == kind) {
            soak(kind, &mut rng);
        }
    }
}
