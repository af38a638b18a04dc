//! Durations as people read them in a listing: `45s`, `12m03s`, `2h05m`, `3d04h`.
//!
//! Two units at most, the second zero-padded so columns line up; parsing of
//! durations (`--older-than 2h`) is humantime's job, not this module's. Also
//! the local clock times people write (`07:30`, "resets 1pm").

use std::fmt;
use std::time::{Duration, SystemTime};

use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Timestamp, civil};

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

/// The first local time `h:m` after `now`, in this machine's time zone.
pub fn next_local(now: SystemTime, h: u32, m: u32) -> Option<SystemTime> {
    next_local_in(now, h, m, &TimeZone::system())
}

/// The first moment strictly after `now` when the clock in `tz` reads `h:m`
/// (`h` < 24, `m` < 60, else `None`): today's if still to come, else
/// tomorrow's. Across a change of offset:
///
/// - a time the clock skips (02:30 when it jumps from 02:00 to 03:00) is
///   taken as the instant of the jump, the first after the gap's start (the
///   clock then reads 03:00), not as 03:30;
/// - a time the clock shows twice (02:30 when it falls back from 03:00 to
///   02:00) is the earlier of the two, or the later when `now` is between
///   them, since that one still happens after `now`.
///
/// `None` also when `now` or the answer is beyond what jiff represents.
pub fn next_local_in(now: SystemTime, h: u32, m: u32, tz: &TimeZone) -> Option<SystemTime> {
    let (h, m) = (i8::try_from(h).ok()?, i8::try_from(m).ok()?);
    let time = civil::Time::new(h, m, 0, 0).ok()?;
    let now = Timestamp::try_from(now).ok()?;
    let mut day = now.to_zoned(tz.clone()).date();
    // Tomorrow's suffices in practice; a third day guards against a clock
    // set back by a whole day.
    for _ in 0..3 {
        let at = day.to_datetime(time);
        let found = match tz.to_ambiguous_timestamp(at).offset() {
            AmbiguousOffset::Unambiguous { offset } => first_after(now, [offset.to_timestamp(at)]),
            AmbiguousOffset::Gap { after, .. } => {
                // `at` read with the later offset falls before the jump, so
                // the jump is the first transition after it.
                let before_jump = after.to_timestamp(at).ok()?;
                let jump = tz.following(before_jump).next()?.timestamp();
                first_after(now, [Ok(jump)])
            }
            AmbiguousOffset::Fold { before, after } => {
                first_after(now, [before.to_timestamp(at), after.to_timestamp(at)])
            }
        };
        if let Some(t) = found {
            return Some(t.into());
        }
        day = day.tomorrow().ok()?;
    }
    None
}

/// The first of `candidates` (earliest first) strictly after `now`.
fn first_after<const N: usize>(
    now: Timestamp,
    candidates: [Result<Timestamp, jiff::Error>; N],
) -> Option<Timestamp> {
    candidates.into_iter().flatten().find(|&t| t > now)
}

/// When `--until` means: a duration from now (`8h`), a local clock time
/// (`07:30`, the next one), or an RFC 3339 time.
pub fn parse_when(s: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now + d);
    }
    if let Some((h, m)) = s.split_once(':')
        && let (Ok(h), Ok(m)) = (h.parse::<u32>(), m.parse::<u32>())
        && h < 24
        && m < 60
        && let Some(t) = next_local(now, h, m)
    {
        return Ok(t);
    }
    humantime::parse_rfc3339_weak(s).map_err(|_| {
        format!(
            "invalid time `{}`: use a duration from now (8h), a local time (07:30) or an RFC 3339 time",
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
