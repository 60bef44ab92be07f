//! One builder per kind: [`FairRLock::options`], [`FairMutex::options`],
//! [`FairRwLock::options`] and [`FairSemaphore::options`] each return a builder whose `open`
//! opens that kind (std's `OpenOptions` shape), with the settings of [`OpenOptions`] that the
//! kind takes. A builder that returned a plain `OpenOptions` let
//! `FairRwLock::options().open(path)` compile and open an exclusive lock.

use std::marker::PhantomData;
use std::path::Path;
use std::time::Duration;

use bytemuck::Pod;

use crate::api::options::{Fairness, OpenOptions};
use crate::error::Result;
use crate::{FairMutex, FairRLock, FairRwLock, FairSemaphore};

/// The settings every kind takes, each delegated to [`OpenOptions`]'s method of the same name.
macro_rules! common_settings {
    () => {
        /// Permission bits of a newly created file (see [`OpenOptions::mode`]).
        pub fn mode(&mut self, mode: u32) -> &mut Self {
            self.options.mode(mode);
            self
        }

        /// Whether to create the file if it does not exist (see [`OpenOptions::create`]).
        pub fn create(&mut self, create: bool) -> &mut Self {
            self.options.create(create);
            self
        }

        /// Waiting-array slots of a newly created file (see [`OpenOptions::slots`]).
        pub fn slots(&mut self, n: u32) -> &mut Self {
            self.options.slots(n);
            self
        }

        /// Participant entries of a newly created file (see [`OpenOptions::participants`]).
        pub fn participants(&mut self, n: u32) -> &mut Self {
            self.options.participants(n);
            self
        }

        /// Opens the lock named `key` in a file of named locks (see [`OpenOptions::name`]).
        pub fn name(&mut self, key: impl Into<String>) -> &mut Self {
            self.options.name(key);
            self
        }

        /// Room for names in a newly created file of named locks (see
        /// [`OpenOptions::name_capacity`]).
        pub fn name_capacity(&mut self, n: u32) -> &mut Self {
            self.options.name_capacity(n);
            self
        }

        /// How long opening may wait for another process's initialisation of the file (see
        /// [`OpenOptions::init_timeout`]).
        pub fn init_timeout(&mut self, d: Duration) -> &mut Self {
            self.options.init_timeout(d);
            self
        }

        /// How long the next-in-line waiter spins before it parks (see
        /// [`OpenOptions::spin`]).
        pub fn spin(&mut self, d: Duration) -> &mut Self {
            self.options.spin(d);
            self
        }

        /// How much of the spin keeps the CPU (see [`OpenOptions::spin_keep_cpu`]).
        pub fn spin_keep_cpu(&mut self, d: Duration) -> &mut Self {
            self.options.spin_keep_cpu(d);
            self
        }
    };
}

/// A lease on every grant (see [`OpenOptions::lease`]), for the kinds that take one.
macro_rules! lease_setting {
    () => {
        /// Every grant made through the handle carries a lease of `d` (see
        /// [`OpenOptions::lease`]).
        pub fn lease(&mut self, d: Duration) -> &mut Self {
            self.options.lease(d);
            self
        }
    };
}

/// A builder for a [`FairRLock`], from [`FairRLock::options`].
#[derive(Clone, Debug, Default)]
pub struct RLockOptions {
    options: OpenOptions,
}

impl RLockOptions {
    common_settings!();
    lease_setting!();

    /// The lock's fairness (see [`OpenOptions::fairness`]).
    pub fn fairness(&mut self, f: Fairness) -> &mut Self {
        self.options.fairness(f);
        self
    }

    /// Opens (by default creating) the lock file at `path` as a re-entrant lock.
    ///
    /// # Errors
    /// As [`OpenOptions::open`].
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FairRLock> {
        self.options.open_rlock(path)
    }
}

/// A builder for a [`FairMutex<T>`], from [`FairMutex::options`]. It has no `lease`: a
/// `FairMutex` takes none (a holder taken over would still hold `&mut T`).
pub struct MutexOptions<T: Pod> {
    options: OpenOptions,
    schema: String,
    _data: PhantomData<fn() -> T>,
}

impl<T: Pod> Clone for MutexOptions<T> {
    fn clone(&self) -> Self {
        MutexOptions {
            options: self.options.clone(),
            schema: self.schema.clone(),
            _data: PhantomData,
        }
    }
}

impl<T: Pod> Default for MutexOptions<T> {
    fn default() -> Self {
        MutexOptions {
            options: OpenOptions::default(),
            schema: String::new(),
            _data: PhantomData,
        }
    }
}

impl<T: Pod> std::fmt::Debug for MutexOptions<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexOptions")
            .field("type", &std::any::type_name::<T>())
            .field("schema", &self.schema)
            .field("options", &self.options)
            .finish()
    }
}

impl<T: Pod> MutexOptions<T> {
    common_settings!();

    /// The lock's fairness (see [`OpenOptions::fairness`]).
    pub fn fairness(&mut self, f: Fairness) -> &mut Self {
        self.options.fairness(f);
        self
    }

    /// Names the schema of the data (none by default): a file created under one schema is
    /// refused ([`Error::DataMismatch`](crate::Error::DataMismatch)) by a `FairMutex` of
    /// another, even of the same layout. Change it when the meaning of `T` changes but not
    /// its size (`"stats/2"` after `"stats/1"`); see [`FairMutex`]'s "Evolving the struct".
    pub fn schema(&mut self, schema: impl Into<String>) -> &mut Self {
        self.schema = schema.into();
        self
    }

    /// Opens (by default creating) the lock file at `path` for a value of type `T`.
    ///
    /// # Errors
    /// As [`OpenOptions::open_mutex`]; [`Error::DataMismatch`](crate::Error::DataMismatch) if
    /// the file's data is of another layout or schema.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FairMutex<T>> {
        FairMutex::with_options(path.as_ref(), &self.options, &self.schema)
    }
}

/// A builder for a [`FairRwLock`], from [`FairRwLock::options`].
#[derive(Clone, Debug, Default)]
pub struct RwLockOptions {
    options: OpenOptions,
}

impl RwLockOptions {
    common_settings!();
    lease_setting!();

    /// Opens (by default creating) the lock file at `path` as a reader/writer lock.
    ///
    /// # Errors
    /// As [`OpenOptions::open_rwlock`].
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FairRwLock> {
        self.options.open_rwlock(path)
    }
}

/// A builder for a [`FairSemaphore`], from [`FairSemaphore::options`].
#[derive(Clone, Debug, Default)]
pub struct SemaphoreOptions {
    options: OpenOptions,
}

impl SemaphoreOptions {
    common_settings!();
    lease_setting!();

    /// Opens (by default creating) the semaphore file at `path` with `permits` permits.
    ///
    /// # Errors
    /// As [`OpenOptions::open_semaphore`].
    pub fn open(&self, path: impl AsRef<Path>, permits: u32) -> Result<FairSemaphore> {
        self.options.open_semaphore(path, permits)
    }
}
