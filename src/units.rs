//! Human sizes (`64M`, `1.5GiB`) and durations (`30s`, `500ms`, `2m`).
//! Sizes are binary: K = 1024. Bare numbers are bytes / seconds.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("invalid size {value:?}: {why} (examples: 512K, 64M, 1.5G, 1048576)")]
    Size { value: String, why: &'static str },
    #[error("invalid duration {value:?}: {why} (examples: 500ms, 30s, 2m, 1h)")]
    Duration { value: String, why: &'static str },
}

/// Splits "1.5GiB" into ("1.5", "GiB").
fn split_number(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

/// Parses a non-negative decimal into (integer part, fraction in 1e-9 units)
/// without going through f64, so `0.1G` is exact and huge values are caught.
fn parse_decimal(num: &str) -> Option<(u64, u64)> {
    if num.is_empty() || num.matches('.').count() > 1 || num == "." {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let int: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    if frac.len() > 9 {
        return None;
    }
    let frac_n: u64 = if frac.is_empty() { 0 } else { frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32) };
    Some((int, frac_n))
}

fn scale(int: u64, frac_nano: u64, mult: u64) -> Option<u64> {
    let whole = int.checked_mul(mult)?;
    let part = (frac_nano as u128 * mult as u128 / 1_000_000_000) as u64;
    whole.checked_add(part)
}

pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let err = |why| UnitError::Size { value: input.to_string(), why };
    let s = input.trim();
    let (num, unit) = split_number(s);
    let (int, frac) = parse_decimal(num).ok_or_else(|| err("expected a number"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(err("unknown unit (use B, K, M, G or T)")),
    };
    scale(int, frac, mult).ok_or_else(|| err("too large"))
}

pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let err = |why| UnitError::Duration { value: input.to_string(), why };
    let s = input.trim();
    let (num, unit) = split_number(s);
    let (int, frac) = parse_decimal(num).ok_or_else(|| err("expected a number"))?;
    let nanos_per: u64 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(err("unknown unit (use ms, s, m or h)")),
    };
    let nanos = scale(int, frac, nanos_per).ok_or_else(|| err("too large"))?;
    Ok(Duration::from_nanos(nanos))
}

/// `1048576` -> `1MiB`, for messages and the verdict's human fields.
/// "YYYY-MM-DD HH:MM:SS UTC" from unix milliseconds.
pub fn format_utc_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let rem = secs % 86400;
    let (y, m, d) = civil_from_days((secs / 86400) as i64);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's
/// civil-from-days), for every date husk prints.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, mult) in UNITS {
        if bytes >= mult && bytes.is_multiple_of(mult) {
            return format!("{}{name}", bytes / mult);
        }
    }
    for (name, mult) in UNITS {
        if bytes >= mult {
            return format!("{:.1}{name}", bytes as f64 / mult as f64);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_format() {
        assert_eq!(format_utc_ms(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc_ms(1_700_000_000_999), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn sizes_parse_binary_units() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size(" 2 g ").unwrap(), 2 << 30);
        assert!(parse_size("").is_err());
        assert!(parse_size("1.2.3M").is_err());
        assert!(parse_size("5X").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
        assert!(parse_size("17000000T").is_err());
    }

    #[test]
    fn durations_parse_common_units() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn sizes_format_readably() {
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(format_size(1536), "1.5KiB");
        assert_eq!(format_size(10), "10B");
    }
}
