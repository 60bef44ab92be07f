//! Regression tests for what the adversarial review of the lock word (issue 15) found: each
//! failed before its fix.

#![allow(unused_imports)]

use super::model::ModelPlatform;
use super::*;
use crate::primitive::Ordering::Relaxed;
