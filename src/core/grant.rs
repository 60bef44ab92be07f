//! What the algorithm hands out and takes: who takes a ticket ([`Me`]), a granted ticket
//! ([`Grant`], and its packed form), and why a wait ended without the lock.

/// Who is taking a ticket.
#[derive(Clone, Copy, Debug)]
pub struct Me {
    /// Our participant index (our process's entry in the file).
    pub participant: u32,
    /// Our kernel thread id (informational).
    pub tid: u32,
    /// Lease to ask for, in milliseconds, or `None` to hold until release.
    pub lease_ms: Option<u64>,
    /// A share (a reader, a semaphore's permit) rather than the whole lock; only for locks of
    /// a weighted kind ([`weighted`](crate::core::weighted)), ignored by an exclusive lock.
    pub shared: bool,
    /// The calling thread's beacon (1 + index, see `Slot::beacon`) to publish with its grant,
    /// or 0: for grants that end with their thread (not a `FairMutex`'s, not the fd form's,
    /// not a share, which may move to another thread).
    pub beacon: u32,
}

/// A granted ticket: proof that the caller holds the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Grant {
    /// The ticket.
    pub ticket: u64,
    /// The previous holder did not release: it died, or its lease was taken over.
    pub died: bool,
    /// The grant has a lease (so a takeover may revoke it).
    pub leased: bool,
    /// Granted by the lock word itself (the uncontended path, or a barge): released with a
    /// CAS on the word, not through a slot (see [`lock_word`](crate::core::state::lock_word)).
    pub fast: bool,
    /// A barge (files with a bypass bound, see [`barge`](crate::core::exclusive::barge)): the how-manieth barge ahead of
    /// ticket `ticket + 1`'s grant (1 to the bound), the low bits of its token. 0 otherwise.
    pub bypass: u16,
    /// How many barges overtook this grant's ticket while it waited (files with a bypass
    /// bound; never more than the bound). 0 otherwise.
    pub overtaken: u16,
    /// A barge's identity while it holds: the lock word's barge count its CAS set (nobody
    /// changes it while the barge holds; see [`barge`](crate::core::exclusive::barge)). 0 otherwise.
    pub count: u16,
}

impl Grant {
    /// A grant of ticket `ticket` through the queue or the word (not a barge).
    #[inline]
    pub fn of(ticket: u64, died: bool, leased: bool, fast: bool) -> Grant {
        Grant {
            ticket,
            died,
            leased,
            fast,
            bypass: 0,
            overtaken: 0,
            count: 0,
        }
    }

    /// Bits of [`Grant::pack`]: the previous holder did not release.
    pub const PACKED_DIED: u32 = 1;
    /// Bits of [`Grant::pack`]: granted by the lock word (a fast grant or a barge).
    pub const PACKED_FAST: u32 = 2;
    /// How many low bits [`Grant::pack`] uses: 21 (died, fast, a barge's 10-bit count, and a
    /// barge's bypass number or a queued grant's overtaken count in 9 bits).
    pub const PACKED_BITS: u32 = 21;
    const COUNT_SHIFT: u32 = 2;
    const BARGES_SHIFT: u32 = 12;

    /// The grant's flags in the one compact form that process-local records keep (a guard,
    /// the process's hold, a thread's leased grants): with the ticket and whether it is
    /// leased, [`Grant::unpack`] gives the grant back.
    #[inline]
    pub fn pack(&self) -> u32 {
        u32::from(self.died)
            | if self.fast { Self::PACKED_FAST } else { 0 }
            | (u32::from(self.count & 0x3FF) << Self::COUNT_SHIFT)
            | (u32::from(
                if self.fast {
                    self.bypass
                } else {
                    self.overtaken
                } & 0x1FF,
            ) << Self::BARGES_SHIFT)
    }

    /// The grant of ticket `ticket` that [`Grant::pack`] made `bits` of.
    #[inline]
    pub fn unpack(ticket: u64, bits: u32, leased: bool) -> Grant {
        let fast = bits & Self::PACKED_FAST != 0;
        let barges = ((bits >> Self::BARGES_SHIFT) & 0x1FF) as u16;
        Grant {
            ticket,
            died: bits & Self::PACKED_DIED != 0,
            leased,
            fast,
            bypass: if fast { barges } else { 0 },
            overtaken: if fast { 0 } else { barges },
            count: ((bits >> Self::COUNT_SHIFT) & 0x3FF) as u16,
        }
    }

    /// Whether this is a barge (a fast grant ahead of a granted, unclaimed ticket).
    #[inline]
    pub fn is_barge(&self) -> bool {
        self.fast && self.bypass != 0
    }

    /// The fencing token in a strict file: `ticket + 1`. Grants happen in ticket order, so
    /// tokens strictly increase across all grants of the file, takeovers included. (A file
    /// with a bypass bound numbers them differently: [`LockState::token`].)
    #[inline]
    pub fn token(&self) -> u64 {
        self.ticket.wrapping_add(1)
    }
}

/// Why waiting for the lock ended without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The deadline passed; the ticket was given up.
    Timeout,
    /// The caller's interrupt hook asked to stop; the ticket was given up.
    Interrupted,
    /// The shared state holds something no correct participant writes.
    Corrupt(&'static str),
}

/// The lock is no longer held by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost;

#[cfg(all(test, not(fairlock_loom)))]
mod tests {
    use super::Grant;

    /// Every field a packed grant keeps comes back, for fast grants (bypass) and queued ones
    /// (overtaken) alike, at the widest values a file allows.
    #[test]
    fn a_packed_grant_unpacks_to_itself() {
        for fast in [false, true] {
            for died in [false, true] {
                for (count, barges) in [(0, 0), (1, 1), (1023, 511), (512, 256)] {
                    let g = Grant {
                        ticket: u64::MAX - 3,
                        died,
                        leased: fast,
                        fast,
                        bypass: if fast { barges } else { 0 },
                        overtaken: if fast { 0 } else { barges },
                        count,
                    };
                    let bits = g.pack();
                    assert!(bits < 1 << Grant::PACKED_BITS);
                    assert_eq!(Grant::unpack(g.ticket, bits, g.leased), g);
                }
            }
        }
    }
}
