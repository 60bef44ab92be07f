//! The core's unit tests: deterministic scenarios on heap memory ([`crate::core::OwnedState`])
//! with the scripted platform ([`crate::core::model::ModelPlatform`], or
//! [`support::HookedPlatform`] to stop a caller at one of its calls), by concern.

mod bounded;
mod fast_path;
mod queue;
mod recovery;
mod support;
mod tokens;
mod waiting;
mod weighted;
mod weighted_recovery;
mod weighted_stress;
