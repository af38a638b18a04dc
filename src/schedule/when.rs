//! When a schedule fires: a cron expression or one time, in a time zone.
//!
//! A cron expression is matched against the **civil time** of its zone (what
//! a wall clock there shows), as cron does, and each matching civil minute
//! becomes one instant:
//!
//! - a civil time that happens once is that instant;
//! - one that happens twice (the hour repeated when clocks go back) is the
//!   first of the two: a schedule fires once, not twice;
//! - one that never happens (the hour skipped when clocks go forward) is the
//!   first instant after the skip: a 02:30 job on that day runs at 03:00.
//!   Two skipped minutes become one instant, so one occurrence.
//!
//! The expression is read by the croner crate, 5 fields (minute, hour, day
//! of month, month, day of week), names for months and days, `7` = Sunday,
//! `L`, `#` and `W`. Day of month and day of week follow Vixie cron: when
//! both are restricted a day matching either one matches; when either field
//! starts with `*` (`*`, `*/2`) a day must match both. croner alone treats
//! only a bare `*` so, which would make `0 9 */2 * 1` fire every odd day
//! and every Monday; farm asks it for Vixie's rule.

use chrono::{Datelike, NaiveDate, Timelike};
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Timestamp, ToSpan};

/// A schedule's rule: a cron expression or one time, and its zone.
#[derive(Clone, Debug)]
pub struct When {
    kind: Kind,
    zone: TimeZone,
}

#[derive(Clone, Debug)]
enum Kind {
    Cron(Box<croner::Cron>),
    At(Timestamp),
}

/// How far civil time can be from an instant's naive reading across a change
/// of offset: more than any zone's jump (the largest is 2 hours).
const SLACK_HOURS: i64 = 3;

/// A cron expression's fields, in order, with what each takes.
const CRON_FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat"),
];

impl When {
    /// A 5-field cron expression in `zone` (an IANA name).
    pub fn cron(expr: &str, zone: &str) -> Result<When, String> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "cron `{expr}` has {} field(s); farm takes 5: minute hour day-of-month month day-of-week",
                fields.len()
            ));
        }
        let vixie_and = fields[2].starts_with('*') || fields[4].starts_with('*');
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .dom_and_dow(vixie_and)
            .build();
        let cron = parser.parse(expr).map_err(|e| {
            // croner's words ("Number out of bounds") name no field: try
            // each alone, the others `*`, to say which it is.
            let bad = (0..5).find(|&i| {
                let alone: Vec<&str> = (0..5)
                    .map(|j| if j == i { fields[i] } else { "*" })
                    .collect();
                parser.parse(&alone.join(" ")).is_err()
            });
            match bad {
                Some(i) => format!(
                    "cron `{expr}` is not valid: the {} field `{}` ({}): {e}",
                    CRON_FIELDS[i].0, fields[i], CRON_FIELDS[i].1
                ),
                None => format!("cron `{expr}` is not valid: {e}"),
            }
        })?;
        Ok(When {
            kind: Kind::Cron(Box::new(cron)),
            zone: zone_named(zone)?,
        })
    }

    /// One time, RFC 3339 with its offset (`2026-12-02T06:00:00+01:00`).
    pub fn at(text: &str, zone: &str) -> Result<When, String> {
        let at: Timestamp = text.parse().map_err(|e| {
            format!(
                "at `{text}` is not an RFC 3339 time with an offset (2026-12-02T06:00:00Z): {e}"
            )
        })?;
        Ok(When {
            kind: Kind::At(at),
            zone: zone_named(zone)?,
        })
    }

    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    /// Whether this is a one-shot (`at`) rule.
    pub fn is_once(&self) -> bool {
        matches!(self.kind, Kind::At(_))
    }

    /// The occurrences `t` with `after < t <= until`, oldest first.
    pub fn between(&self, after: Timestamp, until: Timestamp) -> Vec<Timestamp> {
        let mut out = Vec::new();
        if after >= until {
            return out;
        }
        match &self.kind {
            Kind::At(at) => {
                if after < *at && *at <= until {
                    out.push(*at);
                }
            }
            Kind::Cron(cron) => {
                let slack = self.slack(after, until);
                let mut civil = self.civil(after) - slack;
                let last = self.civil(until) + slack;
                while let Some(next) = next_civil(cron, civil) {
                    if next > last {
                        break;
                    }
                    civil = next;
                    let t = self.instant(next);
                    if after < t && t <= until && out.last() != Some(&t) {
                        out.push(t);
                    }
                }
            }
        }
        out
    }

    /// The first occurrence after `t`, if there is one (within 5 years).
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match &self.kind {
            Kind::At(at) => (*at > t).then_some(*at),
            Kind::Cron(cron) => {
                let mut civil = self.civil(t) - self.slack(t, t);
                let limit = self.civil(t) + (5 * 366).days();
                while let Some(next) = next_civil(cron, civil) {
                    if next > limit {
                        return None;
                    }
                    civil = next;
                    let at = self.instant(next);
                    if at > t {
                        return Some(at);
                    }
                }
                None
            }
        }
    }

    /// The last occurrence at or before `t`, if there is one (within 5
    /// years): one backward search, not a walk through every occurrence of
    /// a window (an every-minute schedule has 1,440 a day).
    pub fn last_until(&self, t: Timestamp) -> Option<Timestamp> {
        match &self.kind {
            Kind::At(at) => (*at <= t).then_some(*at),
            Kind::Cron(cron) => {
                // From just past `t`: the search excludes where it starts.
                let mut civil = self.civil(t) + self.slack(t, t) + 1.minute();
                let limit = self.civil(t) - (5 * 366).days();
                while let Some(prev) = previous_civil(cron, civil) {
                    if prev < limit {
                        return None;
                    }
                    civil = prev;
                    let at = self.instant(prev);
                    if at <= t {
                        return Some(at);
                    }
                }
                None
            }
        }
    }

    /// How far to look past the civil readings of `from` and `to` for
    /// civil times whose instants fall between them: [`SLACK_HOURS`] when
    /// the zone's offset changes near them, else nothing (UTC, and most
    /// days everywhere) — three hours of every-minute matching saved.
    fn slack(&self, from: Timestamp, to: Timestamp) -> jiff::Span {
        let margin = jiff::SignedDuration::from_hours(SLACK_HOURS);
        let changes = self
            .zone
            .following(from - margin)
            .next()
            .is_some_and(|tr| tr.timestamp() <= to + margin);
        if changes {
            SLACK_HOURS.hours()
        } else {
            0.hours()
        }
    }

    /// The wall-clock reading of `t` in the zone.
    fn civil(&self, t: Timestamp) -> DateTime {
        self.zone.to_datetime(t)
    }

    /// The instant of the civil time `c` (see the module doc for the times
    /// a change of offset skips or repeats).
    fn instant(&self, c: DateTime) -> Timestamp {
        let exact = |offset: jiff::tz::Offset| offset.to_timestamp(c).unwrap_or(Timestamp::MAX);
        match self.zone.to_ambiguous_timestamp(c).offset() {
            AmbiguousOffset::Unambiguous { offset } => exact(offset),
            AmbiguousOffset::Fold { before, .. } => exact(before),
            AmbiguousOffset::Gap { after, .. } => {
                // Read with the later offset, `c` falls before the skip; the
                // skip is the next transition from there.
                let early = exact(after);
                self.zone
                    .following(early)
                    .next()
                    .map_or(early, |tr| tr.timestamp())
            }
        }
    }
}

/// The first civil minute after `c` that `cron` matches. croner reads a
/// chrono time; a UTC one carries the civil reading unchanged (UTC has no
/// offsets to change).
fn next_civil(cron: &croner::Cron, c: DateTime) -> Option<DateTime> {
    from_chrono(cron.find_next_occurrence(&to_chrono(c)?, false).ok()?)
}

/// The last civil minute before `c` that `cron` matches.
fn previous_civil(cron: &croner::Cron, c: DateTime) -> Option<DateTime> {
    from_chrono(cron.find_previous_occurrence(&to_chrono(c)?, false).ok()?)
}

fn to_chrono(c: DateTime) -> Option<chrono::DateTime<chrono::Utc>> {
    Some(
        NaiveDate::from_ymd_opt(c.year().into(), c.month() as u32, c.day() as u32)?
            .and_hms_opt(c.hour() as u32, c.minute() as u32, 0)?
            .and_utc(),
    )
}

fn from_chrono(next: chrono::DateTime<chrono::Utc>) -> Option<DateTime> {
    DateTime::new(
        i16::try_from(next.year()).ok()?,
        next.month() as i8,
        next.day() as i8,
        next.hour() as i8,
        next.minute() as i8,
        0,
        0,
    )
    .ok()
}

/// The zone named `name` (IANA: `Europe/Berlin`, `UTC`).
pub fn zone_named(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name).map_err(|_| {
        format!("time zone `{name}` is not an IANA time zone name (like `UTC` or `Europe/Berlin`)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The occurrences of `expr` in `zone` during 2026, as civil times there.
    fn in_2026(expr: &str, zone: &str) -> Vec<DateTime> {
        let when = When::cron(expr, zone).unwrap();
        let z = zone_named(zone).unwrap();
        let start = z
            .to_timestamp(jiff::civil::date(2026, 1, 1).at(0, 0, 0, 0))
            .unwrap();
        let end = z
            .to_timestamp(jiff::civil::date(2027, 1, 1).at(0, 0, 0, 0))
            .unwrap();
        when.between(start - 1.second(), end - 1.second())
            .into_iter()
            .map(|t| z.to_datetime(t))
            .collect()
    }

    /// Regression: `0 25 * * *` was "not valid" with croner's words alone,
    /// which did not say which field; the error names the field and its
    /// range.
    #[test]
    fn an_out_of_range_field_is_named() {
        for (expr, field) in [
            ("0 25 * * *", "hour"),
            ("61 * * * *", "minute"),
            ("0 0 32 * *", "day-of-month"),
            ("0 0 * 13 *", "month"),
            ("0 0 * * 8", "day-of-week"),
        ] {
            let e = When::cron(expr, "UTC").unwrap_err();
            assert!(e.contains(&format!("the {field} field")), "{expr}: {e}");
        }
    }

    #[test]
    fn the_15th_fires_every_month() {
        let days = in_2026("0 9 15 * *", "UTC");
        assert_eq!(days.len(), 12);
        assert!(days.iter().all(|d| d.day() == 15 && d.hour() == 9));
    }

    #[test]
    fn a_weekday_with_a_star_day_of_month_is_only_that_weekday() {
        let days = in_2026("0 9 * * 1", "UTC");
        assert_eq!(days.len(), 52);
        assert!(
            days.iter()
                .all(|d| d.weekday() == jiff::civil::Weekday::Monday)
        );
        // `7` and a name are Sunday too.
        for sunday in ["0 9 * * 7", "0 9 * * sun", "0 9 * * SUN"] {
            let days = in_2026(sunday, "UTC");
            assert_eq!(days.len(), 52, "{sunday}");
            assert!(
                days.iter()
                    .all(|d| d.weekday() == jiff::civil::Weekday::Sunday)
            );
        }
    }

    #[test]
    fn the_31st_happens_seven_times_a_year() {
        assert_eq!(in_2026("0 0 31 * *", "UTC").len(), 7);
    }

    #[test]
    fn steps_count_from_a_field_s_first_value() {
        let jan: Vec<i8> = in_2026("0 0 */2 1 *", "UTC")
            .iter()
            .map(|d| d.day())
            .collect();
        assert_eq!(jan, (1..=31).step_by(2).collect::<Vec<i8>>());
        let months: Vec<i8> = in_2026("0 0 1 */3 *", "UTC")
            .iter()
            .map(|d| d.month())
            .collect();
        assert_eq!(months, [1, 4, 7, 10]);
    }

    #[test]
    fn last_days_and_nth_weekdays_are_understood() {
        let last = in_2026("0 9 L * *", "UTC");
        assert_eq!(last.len(), 12);
        assert!(last.iter().all(|d| d.date().tomorrow().unwrap().day() == 1));
        let second_tuesdays = in_2026("0 9 * * 2#2", "UTC");
        assert_eq!(second_tuesdays.len(), 12);
        assert!(
            second_tuesdays.iter().all(
                |d| d.weekday() == jiff::civil::Weekday::Tuesday && (8..=14).contains(&d.day())
            )
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_follow_vixie_cron() {
        // Both restricted: either.
        let either = in_2026("0 9 1 * 1", "UTC");
        assert_eq!(
            either.len(),
            52 + 12 - 1,
            "Mondays, and the 1sts (June 1st is a Monday)"
        );
        assert!(
            either
                .iter()
                .all(|d| d.day() == 1 || d.weekday() == jiff::civil::Weekday::Monday)
        );
        // A day-of-month that starts with `*`: both.
        let both = in_2026("0 9 */2 * 1", "UTC");
        assert!(!both.is_empty());
        assert!(
            both.iter()
                .all(|d| d.day() % 2 == 1 && d.weekday() == jiff::civil::Weekday::Monday)
        );
    }

    #[test]
    fn weekdays_at_nine_in_berlin_cross_both_changes_of_clock_once_each() {
        let days = in_2026("0 9 * * 1-5", "Europe/Berlin");
        assert_eq!(days.len(), 261, "the weekdays of 2026");
        assert!(days.iter().all(|d| (d.hour(), d.minute()) == (9, 0)));
        let mut dates: Vec<_> = days.iter().map(|d| d.date()).collect();
        dates.dedup();
        assert_eq!(dates.len(), 261, "no day twice");
    }

    #[test]
    fn a_skipped_time_fires_once_at_the_end_of_the_skip() {
        // 2026-03-29: Berlin's clocks go from 02:00 to 03:00.
        let when = When::cron("30 2 * * *", "Europe/Berlin").unwrap();
        let got = when.between(t("2026-03-28T12:00:00Z"), t("2026-03-29T12:00:00Z"));
        assert_eq!(got, [t("2026-03-29T01:00:00Z")], "03:00 CEST");
        // Every minute of the skipped hour is one occurrence, at 03:00.
        let hourly = When::cron("*/15 2 * * *", "Europe/Berlin").unwrap();
        let got = hourly.between(t("2026-03-28T12:00:00Z"), t("2026-03-29T12:00:00Z"));
        assert_eq!(got, [t("2026-03-29T01:00:00Z")]);
    }

    #[test]
    fn a_repeated_time_fires_once_the_first_time() {
        // 2026-10-25: Berlin's clocks go from 03:00 back to 02:00.
        let when = When::cron("30 2 * * *", "Europe/Berlin").unwrap();
        let got = when.between(t("2026-10-24T12:00:00Z"), t("2026-10-25T12:00:00Z"));
        assert_eq!(got, [t("2026-10-25T00:30:00Z")], "02:30 CEST, not CET");
    }

    #[test]
    fn between_is_exclusive_then_inclusive_and_next_after_agrees() {
        let when = When::cron("0 * * * *", "UTC").unwrap();
        let got = when.between(t("2026-12-01T09:00:00Z"), t("2026-12-01T11:00:00Z"));
        assert_eq!(got, [t("2026-12-01T10:00:00Z"), t("2026-12-01T11:00:00Z")]);
        assert_eq!(
            when.next_after(t("2026-12-01T09:00:00Z")),
            Some(t("2026-12-01T10:00:00Z"))
        );
        let once = When::at("2026-12-02T06:00:00+01:00", "UTC").unwrap();
        assert_eq!(
            once.next_after(t("2026-12-01T00:00:00Z")),
            Some(t("2026-12-02T05:00:00Z"))
        );
        assert_eq!(once.next_after(t("2026-12-02T05:00:00Z")), None);
        assert_eq!(
            once.between(t("2026-12-02T04:00:00Z"), t("2026-12-02T05:00:00Z")),
            [t("2026-12-02T05:00:00Z")]
        );
    }

    /// The backward search finds what the forward walk does, across both
    /// changes of clock, every other hour of two days around each.
    #[test]
    fn last_until_agrees_with_between() {
        for (expr, zone) in [
            ("30 2 * * *", "Europe/Berlin"),
            ("*/20 1-3 * * *", "Europe/Berlin"),
            ("0 9 * * 1-5", "America/New_York"),
            ("0 0 1,15 * *", "UTC"),
            ("15 * * * *", "Australia/Lord_Howe"),
        ] {
            let when = When::cron(expr, zone).unwrap();
            for start in [
                "2026-03-28T00:00:00Z",
                "2026-10-24T00:00:00Z",
                "2026-11-01T00:00:00Z",
            ] {
                for h in (0..48).step_by(2) {
                    let now = t(start) + (h * 60 + 7).minutes();
                    let walked = when.between(now - (35 * 24).hours(), now).last().copied();
                    assert_eq!(when.last_until(now), walked, "{expr} in {zone} at {now}");
                }
            }
        }
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        for (expr, want) in [
            ("0 9 * *", "4 field(s)"),
            ("0 0 9 * * *", "6 field(s)"),
            ("0 25 * * *", "not valid"),
            ("0 9 * * funday", "not valid"),
        ] {
            let e = When::cron(expr, "UTC").unwrap_err();
            assert!(e.contains(want), "{expr}: {e}");
        }
        assert!(
            When::cron("0 9 * * *", "Mars/Olympus")
                .unwrap_err()
                .contains("IANA")
        );
        assert!(
            When::at("tomorrow", "UTC")
                .unwrap_err()
                .contains("RFC 3339")
        );
    }
}
