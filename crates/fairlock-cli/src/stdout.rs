//! Writing to stdout, a closed pipe ignored (`fairlock status | head -1`).

use std::io::Write;

/// Writes `text` to stdout and flushes it, ignoring a closed pipe.
pub fn write(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}
