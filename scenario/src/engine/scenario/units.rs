//! Human units in scenario files: durations as `"500ns"`, `"2us"`, `"1.5ms"`,
//! `"1s"`, and expected counts as a number or `{ min = .., max = .. }`.
//!
//! Both are checked while deserializing, so a bad value is reported by toml
//! with its line and column.

use std::fmt;

use rctb_core::time::Duration;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// A duration written with a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct DurationStr(pub Duration);

const UNITS: [(&str, u64); 5] = [("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000)];

/// Parses `"1.5ms"` and friends into nanoseconds, exactly (no floats).
///
/// The text is a decimal number (digits, optionally a fraction, no sign or
/// exponent) followed by `ns`, `us` (or `µs`), `ms` or `s`; blanks before,
/// after and between the two are ignored.
///
/// # Errors
///
/// A message for the scenario's reader when the text is not a number
/// followed by a known unit (`"10"`, `"-1ms"`, `"ms"`), when the fraction
/// has a digit finer than one nanosecond, even a zero (`"1.5ns"`,
/// `"1.0ns"`), or when the whole part overflows `u64` nanoseconds (about
/// 584 years).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (write e.g. \"500ns\", \"2us\", \"1.5ms\", \"1s\")");
    let t = text.trim();
    let (number, scale) =
        UNITS.iter().find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n.trim(), *scale))).ok_or_else(bad)?;
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
    let mut nanos = int.checked_mul(scale).ok_or_else(|| format!("{text:?} is too long"))?;
    let mut place = scale;
    for digit in frac.bytes() {
        if place % 10 != 0 {
            // Zeros below a nanosecond add nothing: "2.0ns" is 2 ns.
            if digit == b'0' {
                continue;
            }
            return Err(format!("{text:?} is finer than one nanosecond"));
        }
        place /= 10;
        nanos = nanos.checked_add((digit - b'0') as u64 * place).ok_or_else(|| format!("{text:?} is too long"))?;
    }
    Ok(Duration::from_nanos(nanos))
}

/// Prints a duration with the largest unit that keeps it exact, in the form
/// [`parse_duration`] reads (`"2ms"`, `"1500us"`, `"7ns"`; zero is `"0ns"`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos() as u64;
    for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= scale && ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

impl<'de> Deserialize<'de> for DurationStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(DurationStr).map_err(de::Error::custom)
    }
}

/// An expected count: exact, or within optional bounds.
///
/// In a scenario file it is a number (`delivered = 100`, exactly 100) or a
/// table of bounds (`{ min = 1 }`, `{ max = 7 }`, `{ min = 1, max = 7 }`;
/// `{}` accepts any count); negative numbers, other keys and `min` above
/// `max` are parse errors. It prints as `= 3`, `in 1..=7`, `>= 1`, `<= 7`
/// or `any`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CountExpect {
    /// The least count accepted, inclusive (`None`: no lower bound).
    pub min: Option<u64>,
    /// The largest count accepted, inclusive (`None`: no upper bound).
    pub max: Option<u64>,
}

impl CountExpect {
    /// Exactly `n`, what a bare number in the file means.
    pub fn exactly(n: u64) -> Self {
        CountExpect { min: Some(n), max: Some(n) }
    }

    /// Whether `got` lies within the bounds (both inclusive).
    pub fn matches(&self, got: u64) -> bool {
        self.min.is_none_or(|m| got >= m) && self.max.is_none_or(|m| got <= m)
    }
}

impl fmt::Display for CountExpect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min, self.max) {
            (Some(a), Some(b)) if a == b => write!(f, "= {a}"),
            (Some(a), Some(b)) => write!(f, "in {a}..={b}"),
            (Some(a), None) => write!(f, ">= {a}"),
            (None, Some(b)) => write!(f, "<= {b}"),
            (None, None) => write!(f, "any"),
        }
    }
}

impl<'de> Deserialize<'de> for CountExpect {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountExpect;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count (e.g. 3) or bounds (e.g. { min = 1, max = 7 })")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CountExpect, E> {
                u64::try_from(v).map(CountExpect::exactly).map_err(|_| E::custom("a count cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CountExpect, E> {
                Ok(CountExpect::exactly(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CountExpect, A::Error> {
                let mut c = CountExpect { min: None, max: None };
                while let Some(key) = map.next_key::<String>()? {
                    let v: i64 = map.next_value()?;
                    let v = u64::try_from(v).map_err(|_| de::Error::custom("a count cannot be negative"))?;
                    match key.as_str() {
                        "min" => c.min = Some(v),
                        "max" => c.max = Some(v),
                        other => return Err(de::Error::unknown_field(other, &["min", "max"])),
                    }
                }
                if let (Some(a), Some(b)) = (c.min, c.max)
                    && a > b
                {
                    return Err(de::Error::custom(format!("min = {a} is above max = {b}")));
                }
                Ok(c)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_exactly() {
        let ns = |s: &str| parse_duration(s).map(|d| d.as_nanos() as u64);
        assert_eq!(ns("500ns"), Ok(500));
        assert_eq!(ns("2us"), Ok(2_000));
        assert_eq!(ns("1.5ms"), Ok(1_500_000));
        assert_eq!(ns("0.000000001s"), Ok(1));
        assert_eq!(ns(".5s"), Ok(500_000_000));
        assert!(ns("1.5ns").unwrap_err().contains("finer than one nanosecond"));
        assert_eq!(ns("2.0ns"), Ok(2));
        assert_eq!(ns("1.000000000s"), Ok(1_000_000_000));
        assert!(ns("1.0000000001s").unwrap_err().contains("finer than one nanosecond"));
        // The largest whole part that fits, with a fraction that would not.
        assert_eq!(ns("18446744073.709551615s"), Ok(u64::MAX));
        assert!(ns("18446744073.999999999s").unwrap_err().contains("too long"), "no overflow");
        assert!(ns("10").unwrap_err().contains("not a duration"));
        assert!(ns("-1ms").unwrap_err().contains("is not a duration"));
        assert!(ns("ms").unwrap_err().contains("is not a duration"));
    }

    #[test]
    fn formats_with_the_largest_exact_unit() {
        assert_eq!(format_duration(Duration::from_micros(1500)), "1500us");
        assert_eq!(format_duration(Duration::from_millis(2)), "2ms");
        assert_eq!(format_duration(Duration::from_nanos(7)), "7ns");
    }

    #[test]
    fn counts_are_numbers_or_bounds() {
        #[derive(Deserialize)]
        struct T {
            c: CountExpect,
        }
        let c = |s: &str| toml::from_str::<T>(s).map(|t| t.c);
        assert_eq!(c("c = 3").unwrap(), CountExpect::exactly(3));
        assert_eq!(c("c = { min = 1 }").unwrap(), CountExpect { min: Some(1), max: None });
        let e = c("c = { min = 5, max = 1 }").unwrap_err().to_string();
        assert!(e.contains("min = 5 is above max = 1") && e.contains("line 1"), "{e}");
        assert!(c("c = { least = 1 }").unwrap_err().to_string().contains("unknown field `least`"));
        assert!(c("c = -1").unwrap_err().to_string().contains("a count cannot be negative"));
    }
}
