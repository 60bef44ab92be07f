//! Parsing durations given in (fractional) seconds.

use std::time::Duration;

/// The longest duration accepted (about 69 years, the lock file's lease limit).
const MAX_SECS: f64 = 2_199_023_255.0;

fn parse(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}': seconds must be a finite number >= 0"));
    }
    if v > MAX_SECS {
        return Err(format!("'{s}': at most {MAX_SECS} seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("'{s}': {e}"))
}

/// `-w SECS`: zero or more seconds.
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    parse(s)
}

/// `--lease SECS`: at least one millisecond.
pub fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("'{s}': a lease must be at least 0.001 seconds"));
    }
    Ok(d)
}

/// `1.234s`, `56ms`, `2m03s`: for humans.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0}ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.3}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, (d.as_secs() / 60) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_seconds() {
        assert_eq!(parse_wait("0.3"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_wait("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert!(parse_wait("-1").is_err());
        assert!(parse_wait("abc").is_err());
        assert!(parse_wait("nan").is_err());
        assert!(parse_wait("inf").is_err());
        assert!(parse_lease("0").is_err());
        assert!(parse_lease("0.0001").is_err());
        assert_eq!(parse_lease("0.25"), Ok(Duration::from_millis(250)));
    }
}
