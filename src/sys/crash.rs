//! Test-only crash injection (private cargo feature `__test-crash-points`): kill or stop this
//! process at a named step of the protocol, so the crash suite can hit every step, not just
//! random moments.
//!
//! It must never be in a production build: with it, an environment variable kills the
//! process. So the feature has a name nobody enables in passing, and the crate refuses to
//! compile with it unless fairlock itself is the package being built (cargo sets
//! `CARGO_PRIMARY_PACKAGE` only for the packages selected on its command line, as for
//! `cargo test` in this repository; a crate that merely depends on fairlock is not one).
//!
//! Configured by the environment variable `FAIRLOCK_CRASH=POINT[@N][:kill|:stop|:wait]`: at
//! the `N`-th time (1-based, default 1) this process passes `POINT`, it raises `SIGKILL`
//! (default) or `SIGSTOP` on itself, or (`wait`) the passing thread alone creates the file
//! `$FAIRLOCK_CRASH_REACHED` and waits until the file `$FAIRLOCK_CRASH_RELEASE` exists (for
//! what another thread of the process does meanwhile: fork, say). Without the feature,
//! `crash_point!` expands to nothing.

const _: () = assert!(
    option_env!("CARGO_PRIMARY_PACKAGE").is_some(),
    "fairlock's feature `__test-crash-points` is for fairlock's own test suite only: it lets an environment variable kill the process"
);
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

struct Plan {
    point: String,
    nth: u64,
    signal: libc::c_int,
}

/// The plan, made once: a leaked box installed by compare-and-swap (no lock and no `OnceLock`,
/// whose initialisation in progress in another thread at a `fork` hangs the child for
/// good). `NONE` once known to be absent.
static PLAN: std::sync::atomic::AtomicPtr<Plan> =
    std::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
static HITS: AtomicU64 = AtomicU64::new(0);

fn plan() -> Option<&'static Plan> {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    let p = PLAN.load(Acquire);
    // SAFETY: a non-null PLAN points to a leaked, never freed box.
    if let Some(plan) = unsafe { p.as_ref() } {
        return (!plan.point.is_empty()).then_some(plan);
    }
    let made = Box::into_raw(Box::new(read_plan().unwrap_or(Plan {
        point: String::new(),
        nth: 0,
        signal: 0,
    })));
    let installed = match PLAN.compare_exchange(core::ptr::null_mut(), made, AcqRel, Acquire) {
        Ok(_) => made,
        Err(theirs) => {
            // SAFETY: `made` was never shared.
            drop(unsafe { Box::from_raw(made) });
            theirs
        }
    };
    // SAFETY: as above.
    let plan = unsafe { &*installed };
    (!plan.point.is_empty()).then_some(plan)
}

fn read_plan() -> Option<Plan> {
    {
        let spec = std::env::var("FAIRLOCK_CRASH").ok()?;
        let (rest, signal) = match spec.rsplit_once(':') {
            Some((r, "stop")) => (r.to_string(), libc::SIGSTOP),
            Some((r, "kill")) => (r.to_string(), libc::SIGKILL),
            Some((r, "wait")) => (r.to_string(), WAIT),
            _ => (spec.clone(), libc::SIGKILL),
        };
        let (point, nth) = match rest.split_once('@') {
            Some((p, n)) => (p.to_string(), n.parse().ok()?),
            None => (rest, 1),
        };
        Some(Plan { point, nth, signal })
    }
}

/// Called at each named step; acts when the plan says so.
pub fn hit(point: &str) {
    let Some(plan) = plan() else { return };
    if plan.point != point {
        return;
    }
    if HITS.fetch_add(1, Relaxed) + 1 == plan.nth {
        if plan.signal == WAIT {
            wait_here();
            return;
        }
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(plan.signal) };
    }
}

/// The `wait` action (not a signal).
const WAIT: libc::c_int = 0;

/// Says the point was reached, then waits for the test to release this thread.
fn wait_here() {
    let (Some(reached), Some(release)) = (
        std::env::var_os("FAIRLOCK_CRASH_REACHED"),
        std::env::var_os("FAIRLOCK_CRASH_RELEASE"),
    ) else {
        return;
    };
    let _ = std::fs::write(reached, b"");
    while !std::path::Path::new(&release).exists() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
