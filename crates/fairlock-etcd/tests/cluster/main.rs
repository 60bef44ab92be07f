//! fairlock-etcd on real etcd clusters that the tests start themselves (`common::cluster`:
//! three members on 127.0.0.1 ports of their own), one test binary for every suite (each links
//! the gRPC client once):
//!
//! * `api`: errors for bad input, try_lock and timeouts, unlock, status, the async API;
//! * `cancel`: a cancelled acquire or release leaves no trace in the queue;
//! * `faults`: members down, hung, or no quorum;
//! * `grant`: the grant a join makes when it finds the queue empty, under lost answers;
//! * `network`: answers lost or late between one client and etcd (a TCP proxy);
//! * `processes`: FIFO across processes, a killed or stopped holder (the test binary
//!   re-executed as a worker: its tests are named `processes::...`).

mod common;

mod api;
mod cancel;
mod faults;
mod grant;
mod network;
mod processes;
mod requests;
mod tls;
