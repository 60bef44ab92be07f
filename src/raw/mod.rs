//! The raw lock: the boundary between the protocol (`core`, over the process's view of the
//! file) and the public handles. [`handle::RawLock`] is every handle's state, whatever its
//! kind; [`acquire`] acquires through it for every kind and way of waiting ([`acquire_async`]
//! without blocking the caller, on [`waiters`]' threads); [`surface`]
//! writes the public acquire methods once for every handle, and [`owned_guard`] the owned
//! (`Arc`) guard of every guard type.

pub(crate) mod acquire;
pub(crate) mod acquire_async;
pub(crate) mod handle;
#[macro_use]
pub(crate) mod owned_guard;
#[macro_use]
pub(crate) mod surface;
pub(crate) mod waiters;
