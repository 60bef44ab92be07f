//! The public API: lock handles, guards, options, status.

pub mod fd_form;
pub mod guard;
pub mod kind_guard;
pub mod kind_options;
pub mod lock;
pub mod mutex;
pub mod mutex_async;
pub mod options;
pub mod process_guard;
pub mod rlock;
pub mod rwlock;
pub mod semaphore;
pub mod status;
