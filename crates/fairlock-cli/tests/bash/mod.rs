//! Scripts run as shell scripts run `fairlock`: `/bin/bash -c SCRIPT` with `$FL` the built
//! binary and `$D` the test's directory (for the fd form's tests, which need bash's `exec 9>>`).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

fn bash(dir: &Path, script: &str) -> Command {
    let mut c = Command::new("/bin/bash");
    c.arg("-c")
        .arg(script)
        .env("FL", BIN)
        .env("D", dir)
        .stdin(Stdio::null());
    c
}

/// Runs `script` to the end.
pub fn sh(dir: &Path, script: &str) -> Output {
    bash(dir, script).output().expect("run bash")
}

/// Starts `script` (stdout discarded, stderr kept).
#[allow(dead_code)] // not every test file starts scripts in the background
pub fn spawn(dir: &Path, script: &str) -> Child {
    bash(dir, script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bash")
}

/// A script's exit status and output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
