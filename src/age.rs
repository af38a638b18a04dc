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

/// When `--since` means: a duration back from now (`12h`), or an RFC 3339
/// time.
pub fn parse_since(s: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(d) = humantime::parse_duration(s) {
        return now
            .checked_sub(d)
            .ok_or_else(|| format!("`{}` goes back before 1970", s.escape_debug()));
    }
    humantime::parse_rfc3339_weak(s).map_err(|_| {
        format!(
            "invalid time `{}`: use a duration back from now (12h) or an RFC 3339 time \
             (2026-12-01T22:00:00Z)",
            s.escape_debug()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_duration_back_or_a_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100_000);
        assert_eq!(
            parse_since("1h", now),
            Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(96_400))
        );
        assert_eq!(
            parse_since("1970-01-01T00:00:10Z", now),
            Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(10))
        );
        assert!(
            parse_since("yesterday", now)
                .unwrap_err()
                .contains("`yesterday`")
        );
    }

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

    fn berlin() -> TimeZone {
        TimeZone::get("Europe/Berlin").expect("Europe/Berlin in the tz database")
    }

    /// An instant written in RFC 3339, offset included.
    fn at(s: &str) -> SystemTime {
        s.parse::<Timestamp>().expect(s).into()
    }

    /// Checks lines of `now clock next`: `now` an instant in RFC 3339, `clock`
    /// an `HH:MM` for Berlin, `next` the instant `next_local_in` should give
    /// (with Berlin's offset then, so a failure shows both) or `none`.
    #[track_caller]
    fn check(cases: &[&str]) {
        let tz = berlin();
        for case in cases {
            let [now, clock, want] = case.split_whitespace().collect::<Vec<_>>()[..] else {
                panic!("not `now clock next`: {case}");
            };
            let (h, m) = clock.split_once(':').unwrap();
            let next = next_local_in(at(now), h.parse().unwrap(), m.parse().unwrap(), &tz);
            let got = next.map_or("none".to_string(), |t| {
                let t = Timestamp::try_from(t).unwrap().to_zoned(tz.clone());
                t.strftime("%Y-%m-%dT%H:%M%:z").to_string()
            });
            assert_eq!(got, want, "{clock} from {now}");
        }
    }

    #[test]
    fn a_clock_time_already_past_today_is_tomorrows() {
        check(&[
            "2026-06-15T08:00+02:00 07:30 2026-06-16T07:30+02:00",
            // Strictly after: at 07:30 itself, the next 07:30 is tomorrow's.
            "2026-06-15T07:30+02:00 07:30 2026-06-16T07:30+02:00",
        ]);
    }

    #[test]
    fn a_clock_time_still_to_come_today_is_todays() {
        check(&[
            "2026-06-15T06:00+02:00 07:30 2026-06-15T07:30+02:00",
            "2026-01-15T07:29:59.5+01:00 07:30 2026-01-15T07:30+01:00",
        ]);
    }

    #[test]
    fn a_time_skipped_by_spring_forward_is_the_jump_itself() {
        // 2026-03-29 in Berlin: 02:00 CET is followed by 03:00 CEST (01:00Z),
        // so 02:00 to 02:59 never show; the clock passes them at the jump.
        check(&[
            "2026-03-28T12:00+01:00 02:30 2026-03-29T03:00+02:00",
            "2026-03-29T01:59:59+01:00 02:30 2026-03-29T03:00+02:00",
            "2026-03-29T00:00+01:00 02:00 2026-03-29T03:00+02:00",
            // Once the jump is past, the next 02:30 is the next day's.
            "2026-03-29T03:00+02:00 02:30 2026-03-30T02:30+02:00",
            // Times either side of the gap are untouched.
            "2026-03-28T12:00+01:00 01:59 2026-03-29T01:59+01:00",
            "2026-03-28T12:00+01:00 03:30 2026-03-29T03:30+02:00",
        ]);
    }

    #[test]
    fn a_time_repeated_by_fall_back_is_the_earlier_unless_it_is_past() {
        // 2026-10-25 in Berlin: 03:00 CEST is followed by 02:00 CET (01:00Z),
        // so 02:30 shows twice, at 00:30Z and at 01:30Z.
        check(&[
            "2026-10-24T12:00+02:00 02:30 2026-10-25T02:30+02:00",
            "2026-10-25T02:30+02:00 02:30 2026-10-25T02:30+01:00",
            "2026-10-25T02:45+02:00 02:30 2026-10-25T02:30+01:00",
            "2026-10-25T02:30+01:00 02:30 2026-10-26T02:30+01:00",
        ]);
    }

    #[test]
    fn clock_times_out_of_range_are_none() {
        check(&[
            "2026-06-15T08:00+02:00 24:00 none",
            "2026-06-15T08:00+02:00 07:60 none",
        ]);
    }

    #[test]
    fn until_a_clock_time_is_within_a_day_in_the_system_zone() {
        let now = at("2026-06-15T08:00:00Z");
        let t = parse_when("07:30", now).unwrap();
        let ahead = t.duration_since(now).unwrap();
        assert!(
            ahead > Duration::ZERO && ahead <= Duration::from_secs(25 * 3600),
            "{ahead:?}"
        );
        assert_eq!(t, next_local(now, 7, 30).unwrap());
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
