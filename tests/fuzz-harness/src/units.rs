//! Sizes and durations (`--memory 1.5G`, `--timeout 500ms`): never panic,
//! and agree with exact arithmetic.
//!
//! The oracle recomputes a value from the accepted text with u128 integer
//! arithmetic (no floating point): number = integer part + up to 9 fraction
//! digits, times the unit, truncated; anything above u64 must be refused.
//! Printed sizes must read back to themselves when exact.

use husk::units::{format_size, parse_duration, parse_size};

pub fn units(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(n) = parse_size(text) {
        let want = exact(text, size_unit);
        assert_eq!(Some(u128::from(n)), want, "parse_size({text:?}) = {n}");
        assert_eq!(parse_size(&n.to_string()), Ok(n));
        let printed = format_size(n);
        if !printed.contains('.') {
            assert_eq!(parse_size(&printed), Ok(n), "format_size({n}) = {printed:?} does not read back");
        }
    } else if let Some(v) = exact(text, size_unit) {
        assert!(v > u128::from(u64::MAX), "parse_size refused {text:?}, worth {v} bytes");
    }
    if let Ok(d) = parse_duration(text) {
        let want = exact(text, duration_unit);
        assert_eq!(Some(d.as_nanos()), want, "parse_duration({text:?}) = {d:?}");
    } else if let Some(v) = exact(text, duration_unit) {
        assert!(v > u128::from(u64::MAX), "parse_duration refused {text:?}, worth {v} ns");
    }
}

fn size_unit(u: &str) -> Option<u128> {
    Some(match u.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    })
}

fn duration_unit(u: &str) -> Option<u128> {
    Some(match u {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// The exact value of `text` (digits, at most one '.', at most 9 fraction
/// digits, then a unit), or None if it is not of that form.
fn exact(text: &str, unit: fn(&str) -> Option<u128>) -> Option<u128> {
    let s = text.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, rest) = (&s[..end], s[end..].trim());
    let mult = unit(rest)?;
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if num.is_empty() || num == "." || frac.contains('.') || frac.len() > 9 {
        return None;
    }
    // Leading zeros are fine; the value must fit u128 for the comparison.
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_nano: u128 =
        if frac.is_empty() { 0 } else { frac.parse::<u128>().ok()? * 10u128.pow(9 - frac.len() as u32) };
    Some(int.checked_mul(mult)? + frac_nano * mult / 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_matches_the_documented_examples() {
        assert_eq!(exact("1.5G", size_unit), Some(3 << 29));
        assert_eq!(exact("500ms", duration_unit), Some(500_000_000));
        assert_eq!(exact("1.2.3M", size_unit), None);
        for s in ["64M", "1.5G", "0.1G", "2m", "1.5s", "18446744073709551615", "17000000T", ".5k", "007K"] {
            units(s.as_bytes());
        }
    }
}
