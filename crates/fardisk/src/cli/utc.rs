//! UTC dates for the CLI, both ways, in the proleptic Gregorian calendar (H. Hinnant's
//! algorithms): fardisk prints and reads UTC only, so no time-zone database is needed.

use anyhow::Result;

/// Days since 1970-01-01 to (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

/// (year, month, day) to days since 1970-01-01: the inverse of `civil_from_days`.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = y - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD HH:MM:SS` of a Unix time in ms.
pub fn date_time(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
}

/// `YYYY-MM-DD HH:MM:SS UTC`, as the rest of fardisk's output shows times.
pub fn date_text(ms: u64) -> String {
    format!("{} UTC", date_time(ms))
}

/// "YYYY-MM-DD HH:MM:SS" (UTC; a "T" and a trailing "Z" are accepted too) or Unix seconds, as ms.
pub fn parse_time_ms(s: &str) -> Result<u64> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(secs * 1000);
    }
    let t = s.trim().trim_end_matches('Z').replace('T', " ");
    let bad =
        || anyhow::anyhow!("'{s}' is not a time: use UTC \"YYYY-MM-DD HH:MM:SS\" or Unix seconds");
    let (date, time) = t.split_once(' ').unwrap_or((t.as_str(), "00:00:00"));
    let d: Vec<i64> =
        date.split('-').map(|x| x.parse().map_err(|_| bad())).collect::<Result<_>>()?;
    let h: Vec<i64> =
        time.split(':').map(|x| x.parse().map_err(|_| bad())).collect::<Result<_>>()?;
    if d.len() != 3
        || h.is_empty()
        || h.len() > 3
        || !(1..=12).contains(&d[1])
        || !(1..=31).contains(&d[2])
    {
        return Err(bad());
    }
    let secs = days_from_civil(d[0], d[1], d[2]) * 86_400
        + h[0] * 3600
        + h.get(1).copied().unwrap_or(0) * 60
        + h.get(2).copied().unwrap_or(0);
    u64::try_from(secs * 1000).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(date_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(date_text(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(date_text(1_795_305_600_000 + 3_723_000), "2026-11-22 01:02:03 UTC");
        assert_eq!(date_time(0), "1970-01-01 00:00:00");
        assert_eq!(date_time(1_795_000_000_000), "2026-11-18 11:06:40");
    }

    #[test]
    fn times() {
        assert_eq!(parse_time_ms("1795000000").unwrap(), 1_795_000_000_000);
        assert_eq!(parse_time_ms("2026-11-18 11:06:40").unwrap(), 1_795_000_000_000);
        assert_eq!(parse_time_ms("2026-11-18T11:06:40Z").unwrap(), 1_795_000_000_000);
        assert_eq!(parse_time_ms("1970-01-01").unwrap(), 0);
        assert!(parse_time_ms("yesterday").is_err());
        assert!(parse_time_ms("2026-13-01 00:00:00").is_err());
    }
}
