//! The circuit breaker: an agent whose sessions fail again and again with
//! nothing done pauses before its next claim, for twice as long each time it
//! trips: a wait that lifts, not a loop that burns attempts (no path of the
//! loop may run sessions again and again without counting or pausing).
//!
//! Pure: it counts and says when to pause and for how long; the loop says
//! so, journals it and waits.

use std::time::Duration;

/// The circuit breaker's longest pause.
pub const TRIP_LONGEST: Duration = Duration::from_secs(30 * 60);

/// One loop's breaker: failed sessions in a row, how often it tripped since
/// work last landed, and whether a pause is due before the next claim.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Breaker {
    fails: u32,
    trips: u32,
    due: bool,
}

/// A pause the breaker asks for: after `fails` failed sessions in a row,
/// this long (before jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trip {
    pub fails: u32,
    pub pause: Duration,
}

impl Breaker {
    /// Work landed: the breaker closes, its next pause back to the first.
    pub fn done(&mut self) {
        *self = Breaker::default();
    }

    /// A failed session. `trip_after` in a row (0: never) trip the breaker:
    /// a pause is due before the next claim, not now, so that a run whose
    /// last task just failed ends at once.
    pub fn failed(&mut self, trip_after: u32) {
        self.fails += 1;
        if trip_after > 0 && self.fails >= trip_after {
            self.due = true;
        }
    }

    /// Before the next claim: the pause due, if the breaker tripped, the
    /// first one `first` long, doubling on each trip up to [`TRIP_LONGEST`].
    /// Half open after it: one more failure trips it again.
    pub fn trip(&mut self, trip_after: u32, first: Duration) -> Option<Trip> {
        if !std::mem::take(&mut self.due) {
            return None;
        }
        let pause = first
            .saturating_mul(1 << self.trips.min(10))
            .min(TRIP_LONGEST);
        let fails = self.fails;
        self.fails = trip_after.saturating_sub(1);
        self.trips += 1;
        Some(Trip { fails, pause })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn failed(b: &mut Breaker, times: u32, trip_after: u32) {
        for _ in 0..times {
            b.failed(trip_after);
        }
    }

    #[test]
    fn fewer_failures_than_the_threshold_do_not_trip_it() {
        let mut b = Breaker::default();
        failed(&mut b, 2, 3);
        assert_eq!(b.trip(3, MIN), None);
    }

    #[test]
    fn the_threshold_trips_it_once_with_the_first_pause() {
        let mut b = Breaker::default();
        failed(&mut b, 3, 3);
        assert_eq!(
            b.trip(3, MIN),
            Some(Trip {
                fails: 3,
                pause: MIN
            })
        );
        // Paused once: not again until another failure.
        assert_eq!(b.trip(3, MIN), None);
    }

    #[test]
    fn half_open_one_more_failure_trips_it_again_for_twice_as_long() {
        let mut b = Breaker::default();
        failed(&mut b, 3, 3);
        b.trip(3, MIN);
        b.failed(3);
        assert_eq!(
            b.trip(3, MIN),
            Some(Trip {
                fails: 3,
                pause: 2 * MIN
            })
        );
        b.failed(3);
        assert_eq!(b.trip(3, MIN).map(|t| t.pause), Some(4 * MIN));
    }

    #[test]
    fn work_done_closes_it_and_resets_the_pause() {
        let mut b = Breaker::default();
        failed(&mut b, 3, 3);
        b.trip(3, MIN);
        b.done();
        assert_eq!(b, Breaker::default());
        failed(&mut b, 2, 3);
        assert_eq!(b.trip(3, MIN), None);
        b.failed(3);
        assert_eq!(b.trip(3, MIN).map(|t| t.pause), Some(MIN));
    }

    #[test]
    fn a_success_between_failures_means_none_in_a_row() {
        let mut b = Breaker::default();
        failed(&mut b, 2, 3);
        b.done();
        failed(&mut b, 2, 3);
        assert_eq!(b.trip(3, MIN), None);
    }

    #[test]
    fn zero_never_trips_it() {
        let mut b = Breaker::default();
        failed(&mut b, 100, 0);
        assert_eq!(b.trip(0, MIN), None);
    }

    #[test]
    fn the_pause_stops_growing_at_the_longest() {
        let mut b = Breaker::default();
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            b.failed(1);
            last = b.trip(1, MIN).expect("one failure trips it").pause;
        }
        assert_eq!(last, TRIP_LONGEST);
    }
}
