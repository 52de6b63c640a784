//! A page's time range: what its `range` parameter says, else the page's default, shortened to
//! the cluster's age (rounded up to a step) when the cluster is younger than that, so that a
//! new cluster's history fills the charts instead of their right-most pixels.
//!
//! A range is written as a number and a unit, `m` (minutes), `h` (hours) or `d` (days), from
//! [`MIN_RANGE_MS`] to [`MAX_RANGE_MS`]: `15m`, `1h`, `7d`. The pages write it back in one
//! spelling (`60m` is `1h`), so the range `<select>` shows what the address says.

use troupe_web::pages::Choice;

/// A `range` parameter that is not one: what the 400 page says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadRange(pub(crate) String);

/// A page's range when its address names none and the cluster is older.
pub(crate) const DEFAULT_RANGE_MS: i64 = HOUR;
/// The shortest range.
pub(crate) const MIN_RANGE_MS: i64 = MINUTE;
/// The longest range.
pub(crate) const MAX_RANGE_MS: i64 = 7 * DAY;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// The steps a young cluster's age is rounded up to, in minutes.
const AGE_STEPS: &[i64] = &[1, 2, 3, 5, 10, 15, 20, 30, 45];

/// The choices every range `<select>` offers (besides the range shown).
const CHOICES: &[i64] = &[15 * MINUTE, HOUR, 6 * HOUR, 24 * HOUR, 7 * DAY];

/// The time range a page shows: `[since_ms, until_ms)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    /// How long, in milliseconds.
    pub(crate) ms: i64,
    /// Its start (inclusive, epoch ms).
    pub(crate) since_ms: i64,
    /// Its end (exclusive, epoch ms): just after now.
    pub(crate) until_ms: i64,
    /// The page's default was shortened to the cluster's age.
    pub(crate) fitted: bool,
}

impl Window {
    /// The window ending at `now_ms` that `range` (the page's parameter) names; without one,
    /// `default_ms`, or the age of a cluster whose history started at `first_ms` when that is
    /// shorter. A bad `range` is refused, naming what is allowed.
    pub(crate) fn resolve(
        range: Option<&str>,
        default_ms: i64,
        now_ms: i64,
        first_ms: Option<i64>,
    ) -> Result<Self, BadRange> {
        let (ms, fitted) = match range.filter(|r| !r.is_empty()) {
            Some(range) => (parse(range)?, false),
            None => {
                let fit = first_ms.map_or(default_ms, |first| {
                    fit(now_ms.saturating_sub(first), default_ms)
                });
                (fit, fit < default_ms)
            }
        };
        let until_ms = now_ms + 1;
        Ok(Self {
            ms,
            since_ms: until_ms - ms,
            until_ms,
            fitted,
        })
    }

    /// The range as the address writes it (`3m`, `1h`, `7d`).
    pub(crate) fn range(&self) -> String {
        text(self.ms)
    }

    /// The range in words: `last 3 minutes`, `last hour`.
    pub(crate) fn label(&self) -> String {
        let words = words(self.ms);
        if self.fitted {
            format!("{words} (since the cluster started)")
        } else {
            words
        }
    }

    /// The options of a range `<select>`: the usual ranges and this one, shortest first, this
    /// one selected.
    pub(crate) fn choices(&self) -> Vec<Choice> {
        let mut all: Vec<i64> = CHOICES.to_vec();
        if !all.contains(&self.ms) {
            all.push(self.ms);
            all.sort_unstable();
        }
        all.into_iter()
            .map(|ms| Choice {
                value: text(ms),
                label: if ms == self.ms {
                    self.label()
                } else {
                    words(ms)
                },
                selected: ms == self.ms,
            })
            .collect()
    }
}

/// The range a cluster of `age_ms` gets by default: its age rounded up to a step, or
/// `default_ms` when that is shorter.
pub(crate) fn fit(age_ms: i64, default_ms: i64) -> i64 {
    AGE_STEPS
        .iter()
        .map(|m| m * MINUTE)
        .find(|step| *step >= age_ms)
        .map_or(default_ms, |step| step.min(default_ms))
}

/// Parses a `range` parameter.
pub(crate) fn parse(range: &str) -> Result<i64, BadRange> {
    let bad = || {
        BadRange(format!(
            "The `range` parameter must be a number and a unit, m (minutes), h (hours) or d \
             (days), from {} to {}, like 15m, 1h or 7d; “{range}” is not.",
            text(MIN_RANGE_MS),
            text(MAX_RANGE_MS)
        ))
    };
    let split = range.len().saturating_sub(1);
    let (number, unit) = range.split_at_checked(split).ok_or_else(bad)?;
    let unit_ms = match unit {
        "m" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        _ => return Err(bad()),
    };
    if number.is_empty() || number.len() > 6 || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let ms = number.parse::<i64>().map_err(|_| bad())? * unit_ms;
    if !(MIN_RANGE_MS..=MAX_RANGE_MS).contains(&ms) {
        return Err(bad());
    }
    Ok(ms)
}

/// A range as the address writes it: days from two days on when whole, else hours when
/// whole, else minutes (`3m`, `90m`, `1h`, `24h`, `7d`).
pub(crate) fn text(ms: i64) -> String {
    if ms >= 2 * DAY && ms % DAY == 0 {
        format!("{}d", ms / DAY)
    } else if ms % HOUR == 0 {
        format!("{}h", ms / HOUR)
    } else {
        format!("{}m", ms / MINUTE)
    }
}

/// A range in words: `last minute`, `last 3 minutes`, `last hour`, `last 24 hours`,
/// `last 7 days`.
pub(crate) fn words(ms: i64) -> String {
    let (n, one, many) = if ms >= 2 * DAY && ms % DAY == 0 {
        (ms / DAY, "day", "days")
    } else if ms % HOUR == 0 {
        (ms / HOUR, "hour", "hours")
    } else {
        (ms / MINUTE, "minute", "minutes")
    };
    if n == 1 {
        format!("last {one}")
    } else {
        format!("last {n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_young_clusters_age_is_rounded_up_to_a_step_and_an_old_one_gets_the_default() {
        assert_eq!(fit(10_000, HOUR), MINUTE);
        assert_eq!(fit(2 * MINUTE + 1, HOUR), 3 * MINUTE);
        assert_eq!(fit(11 * MINUTE, HOUR), 15 * MINUTE);
        assert_eq!(fit(46 * MINUTE, HOUR), HOUR);
        assert_eq!(fit(3 * DAY, HOUR), HOUR);
        assert_eq!(fit(20 * MINUTE, 15 * MINUTE), 15 * MINUTE);
    }

    #[test]
    fn an_explicit_range_wins_over_the_clusters_age() {
        let now = 10 * DAY;
        let young = Window::resolve(None, HOUR, now, Some(now - 100_000)).unwrap();
        assert_eq!((young.ms, young.fitted), (2 * MINUTE, true));
        assert_eq!(young.since_ms, now + 1 - 2 * MINUTE);
        assert_eq!(young.range(), "2m");
        let asked = Window::resolve(Some("1h"), HOUR, now, Some(now - 100_000)).unwrap();
        assert_eq!((asked.ms, asked.fitted), (HOUR, false));
        let ancient = Window::resolve(None, HOUR, now, Some(i64::MIN)).unwrap();
        assert_eq!(ancient.ms, HOUR, "a first event at any time is no overflow");
        let future = Window::resolve(None, HOUR, now, Some(i64::MAX)).unwrap();
        assert_eq!(future.ms, MINUTE);
        let empty = Window::resolve(None, HOUR, now, None).unwrap();
        assert_eq!((empty.ms, empty.fitted), (HOUR, false));
    }

    #[test]
    fn ranges_parse_and_print_in_one_spelling() {
        for (range, ms, back) in [
            ("1m", MINUTE, "1m"),
            ("90m", 90 * MINUTE, "90m"),
            ("60m", HOUR, "1h"),
            ("24h", DAY, "24h"),
            ("2d", 2 * DAY, "2d"),
            ("7d", 7 * DAY, "7d"),
        ] {
            assert_eq!(parse(range).unwrap(), ms, "{range}");
            assert_eq!(text(ms), back);
        }
        for bad in [
            "",
            "m",
            "0m",
            "8d",
            "forever",
            "1.5h",
            "-1h",
            "1 h",
            "1H",
            "99999999m",
            "é",
        ] {
            let Err(BadRange(message)) = parse(bad) else {
                panic!("{bad:?} parsed");
            };
            assert!(
                message.contains("`range`") && message.contains("1m to 7d"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_select_holds_the_usual_ranges_and_the_one_shown() {
        let window = Window::resolve(None, HOUR, 10 * DAY, Some(10 * DAY - 100_000)).unwrap();
        let choices = window.choices();
        let values: Vec<&str> = choices.iter().map(|c| c.value.as_str()).collect();
        assert_eq!(values, ["2m", "15m", "1h", "6h", "24h", "7d"]);
        assert!(
            choices[0].selected && choices[0].label == "last 2 minutes (since the cluster started)"
        );
        assert_eq!(choices.iter().filter(|c| c.selected).count(), 1);
        assert_eq!(words(HOUR), "last hour");
        assert_eq!(words(7 * DAY), "last 7 days");
    }
}
