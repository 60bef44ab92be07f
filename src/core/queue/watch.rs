//! What one acquirer watches while it waits: the observations it times locally (graces,
//! pending leases: no shared clock is trusted for those), the hook that may stop it early, and
//! what a recovery pass found ahead of it ([`Ahead`]).

use crate::core::WaitError;

/// What a [`Watch`] times: (ticket, word, lease field) as observed.
type Key = (u64, u64, u64);

/// One observation: its key, since when (ns), and the last pass that saw it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    key: Key,
    since: u64,
    pass: u64,
}

/// What one acquirer has been watching, to time graces and pending leases locally (no shared
/// clock is trusted for those), and what may make it stop waiting early: a caller's hook,
/// asked after every wake-up (see [`Watch::interruptible`]).
#[derive(Default)]
pub struct Watch<'a> {
    /// What was observed since when: up to four (ticket, word, lease field) keys at once (a
    /// weighted recovery times several granted or unpublished tickets in one pass; one key
    /// would make each reset the other's timer).
    seen: [Option<Seen>; 4],
    /// Recovery passes made so far (see [`Watch::new_pass`]).
    pass: u64,
    interrupt: Option<&'a mut dyn FnMut() -> bool>,
    /// The platform's own reason to stop (see [`Watch::abandoning`]).
    abandon: Option<&'a dyn Fn() -> bool>,
    interrupted: bool,
    /// Tickets of a weighted kind given up to be retaken (see `publish`).
    retakes: u32,
}

impl core::fmt::Debug for Watch<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Watch")
            .field("seen", &self.seen)
            .field("interruptible", &self.interrupt.is_some())
            .field("interrupted", &self.interrupted)
            .finish()
    }
}

/// The longest a waiter with an interrupt hook sleeps between two looks at the hook (it is
/// also asked after every wake-up, a signal's `EINTR` included).
pub const INTERRUPT_POLL_NS: u64 = 50_000_000;

impl<'a> Watch<'a> {
    /// A watch whose waiter gives its ticket up, as at a deadline, once `interrupt()` returns
    /// true. The hook is asked after every wake-up and at least every [`INTERRUPT_POLL_NS`].
    pub fn interruptible(interrupt: &'a mut dyn FnMut() -> bool) -> Watch<'a> {
        Watch {
            interrupt: Some(interrupt),
            ..Watch::default()
        }
    }

    /// This watch, whose waiter also gives its ticket up once `abandon()` says so: the
    /// platform's reason to stop (its lock state is gone: `sys::sigbus`), asked wherever the
    /// hook is but without bounding the sleeps (it is asked at the next wake-up).
    pub fn abandoning(self, abandon: &'a dyn Fn() -> bool) -> Watch<'a> {
        Watch {
            abandon: Some(abandon),
            ..self
        }
    }

    /// Asks the platform's `abandon` and the hook (once one said yes, the answer stays yes).
    /// True: stop waiting.
    pub(crate) fn interrupted(&mut self) -> bool {
        if !self.interrupted && self.abandon.is_some_and(|a| a()) {
            self.interrupted = true;
        }
        if !self.interrupted
            && let Some(f) = self.interrupt.as_mut()
        {
            self.interrupted = f();
        }
        self.interrupted
    }

    /// Whether the acquisition may give up one more ticket of a weighted kind to take a new
    /// one: at most `slots` times (a file of `slots` slots has fewer long-held shares than
    /// that, so as many retakes in a row always reach a free slot unless other takers keep
    /// taking the ones in between); counts it if so.
    pub(crate) fn may_retake(&mut self, slots: u64) -> bool {
        let ok = u64::from(self.retakes) < slots.min(u64::from(u32::MAX));
        self.retakes += u32::from(ok);
        ok
    }

    /// Whether sleeps must be bounded by [`INTERRUPT_POLL_NS`].
    pub(crate) fn has_hook(&self) -> bool {
        self.interrupt.is_some()
    }

    /// The error for a waiter that stopped without the lock: interrupted, or timed out.
    pub(crate) fn stopped(&self) -> WaitError {
        if self.interrupted {
            WaitError::Interrupted
        } else {
            WaitError::Timeout
        }
    }

    /// How long the same (ticket, word, lease field) has been observed.
    pub(crate) fn observe(&mut self, key: (u64, u64, u64), now: u64) -> u64 {
        let pass = self.pass;
        if let Some(e) = self.seen.iter_mut().flatten().find(|e| e.key == key) {
            e.pass = pass;
            return now.saturating_sub(e.since);
        }
        // A new observation takes the place of what was seen of the same ticket (which
        // changed), or a free entry, or one no pass saw since the longest (a ticket that was
        // passed), or else — more tickets timed at once than entries — the *newest* timer, so
        // that the longest-watched ones still come to their end (evicting the oldest would reset
        // each timer before it expired: five frozen leased grantees would never be passed).
        let i = self
            .seen
            .iter()
            .position(|e| e.is_some_and(|e| e.key.0 == key.0))
            .or_else(|| self.seen.iter().position(Option::is_none))
            .or_else(|| {
                (0..self.seen.len())
                    .filter(|&i| self.seen[i].is_some_and(|e| e.pass != pass))
                    .min_by_key(|&i| self.seen[i].map_or(0, |e| e.pass))
            })
            .unwrap_or_else(|| {
                (0..self.seen.len())
                    .max_by_key(|&i| self.seen[i].map_or(0, |e| e.since))
                    .unwrap_or(0)
            });
        self.seen[i] = Some(Seen {
            key,
            since: now,
            pass,
        });
        0
    }

    /// A recovery pass begins: observations not repeated from now on belong to tickets that
    /// were passed, and may make way for new ones.
    pub(crate) fn new_pass(&mut self) {
        self.pass = self.pass.wrapping_add(1);
    }
}

/// What stands between an acquirer and the lock after a recovery pass (`recover`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// Every ticket before `me` is final: `me` was granted (or pre-granted) by this pass or
    /// earlier, or is about to be.
    Clear,
    /// A live holder, grantee or waiter is ahead.
    Busy,
    /// The first unfinished ticket ahead is a grant in advance (`Ready`) that its taker has not
    /// claimed; observed for this many ns, less than the grace (it is skipped after that).
    Unclaimed(u64),
}
