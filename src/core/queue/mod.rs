//! What every kind shares: the queue of tickets in slots — publishing, claiming a grant, the `head` frontier, the laps whose takers gave up, and lapped takers.

pub mod claim;
pub mod frontier;
pub mod given_up;
pub mod lapped;
pub mod publish;
pub mod watch;
