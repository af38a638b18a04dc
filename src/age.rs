//! Durations as people read them in a listing: `45s`, `12m03s`, `2h05m`, `3d04h`.
//!
//! Two units at most, the second zero-padded so columns line up; parsing of
//! durations (`--older-than 2h`) is humantime's job, not this module's.

use std::fmt;
use std::time::Duration;

/// A duration displayed compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Age(pub Duration);

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs();
        let (big, big_unit, small, small_unit) = match s {
            0..60 => return write!(f, "{s}s"),
            60..3600 => (s / 60, "m", s % 60, "s"),
            3600..86_400 => (s / 3600, "h", s % 3600 / 60, "m"),
            _ => (s / 86_400, "d", s % 86_400 / 3600, "h"),
        };
        if small == 0 {
            write!(f, "{big}{big_unit}")
        } else {
            write!(f, "{big}{big_unit}{small:02}{small_unit}")
        }
    }
}

/// Parse a user-given duration (`90s`, `10m`, `2h`, `1d`), humantime syntax.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| {
        format!(
            "invalid duration `{}`: {e}; use a number and a unit, like 90s, 10m, 2h or 1d",
            s.escape_debug()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m"),
            (61, "1m01s"),
            (723, "12m03s"),
            (3600, "1h"),
            (7500, "2h05m"),
            (86_400, "1d"),
            (277_200, "3d05h"),
        ];
        for (secs, want) in cases {
            assert_eq!(Age(Duration::from_secs(secs)).to_string(), want);
        }
        assert_eq!(Age(Duration::from_millis(999)).to_string(), "0s");
    }

    #[test]
    fn durations_parse_in_humantime_syntax() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        let err = parse_duration("2 fortnights").unwrap_err();
        assert!(
            err.contains("invalid duration `2 fortnights`") && err.contains("2h"),
            "{err}"
        );
        assert!(parse_duration("").is_err());
    }
}
