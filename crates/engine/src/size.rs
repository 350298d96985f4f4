//! Sizes as people write them: `4096`, `8G`, `512M`, `1.5k`, `16MiB` (powers of 1024, as zfs
//! reads them). The one parser for every size fardisk takes: volume sizes, and properties such as
//! `arc_max` in `create -o` and `set`. Sizes are printed back as `8.0G` (`human`).

/// Why a size did not parse; callers word the message for their context (a volume size, a
/// property value) and every one of them says what a valid size looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// Not a number with an optional suffix (`fast`, `-1`, `1e3`, `8 G`).
    NotANumber,
    /// A suffix other than K, M, G or T (with an optional `B` or `iB`).
    UnknownUnit(String),
    /// More than 2^64 - 1 bytes.
    TooLarge,
}

/// The suffixes `parse_size` takes, for messages.
pub const SIZE_SUFFIXES: &str = "K, M, G or T";

fn multiplier(unit: &str) -> Option<u64> {
    let u = unit.to_ascii_uppercase();
    let u = u.strip_suffix("IB").or_else(|| u.strip_suffix('B')).unwrap_or(&u);
    Some(match u {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return None,
    })
}

/// Bytes in `s`: digits with an optional fraction, then an optional K, M, G or T suffix
/// (case-insensitive, optionally followed by `B` or `iB`). A fraction is taken exactly and the
/// result rounded down to whole bytes (`1.5k` is 1536).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return Err(SizeError::NotANumber);
    }
    let mult = multiplier(unit).ok_or_else(|| SizeError::UnknownUnit(unit.to_string()))?;
    let whole: u128 =
        if whole.is_empty() { 0 } else { whole.parse().map_err(|_| SizeError::TooLarge)? };
    // Digits past the 19th cannot change the result by a whole byte below 2^64 (mult <= 2^40).
    let fraction = &fraction[..fraction.len().min(19)];
    let (frac_digits, scale) = match fraction {
        "" => (0u128, 1u128),
        f => (f.parse::<u128>().map_err(|_| SizeError::NotANumber)?, 10u128.pow(f.len() as u32)),
    };
    let bytes = whole
        .checked_mul(mult as u128)
        .and_then(|b| b.checked_add(frac_digits * mult as u128 / scale))
        .ok_or(SizeError::TooLarge)?;
    u64::try_from(bytes).map_err(|_| SizeError::TooLarge)
}

/// `bytes` as zfs prints sizes: `512B`, `4.0K`, `8.0G` (one decimal, powers of 1024).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_plain_numbers() {
        for (text, bytes) in [
            ("4096", 4096),
            ("0", 0),
            ("8G", 8 << 30),
            ("8g", 8 << 30),
            ("8GB", 8 << 30),
            ("8GiB", 8 << 30),
            ("16M", 16 << 20),
            ("16mib", 16 << 20),
            ("1.5k", 1536),
            ("0.5K", 512),
            (".5K", 512),
            ("1.", 1),
            (" 64K ", 64 << 10),
            ("2T", 2 << 40),
            ("12B", 12),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn a_fraction_rounds_down_to_whole_bytes() {
        assert_eq!(parse_size("0.1K"), Ok(102));
        assert_eq!(parse_size("1.9"), Ok(1));
        assert_eq!(parse_size("1.0000000000000000000000001K"), Ok(1024));
    }

    #[test]
    fn what_is_not_a_size() {
        for text in ["", "fast", "-1", ".", ".K", "1..5K", "K", "1.2.3"] {
            assert_eq!(parse_size(text), Err(SizeError::NotANumber), "{text}");
        }
        assert_eq!(parse_size("12Q"), Err(SizeError::UnknownUnit("Q".into())));
        assert_eq!(parse_size("1e3"), Err(SizeError::UnknownUnit("e3".into())));
        assert_eq!(parse_size("8 G"), Err(SizeError::UnknownUnit(" G".into())));
        assert_eq!(parse_size("8P"), Err(SizeError::UnknownUnit("P".into())));
        assert_eq!(parse_size("18446744073709551616"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("16777216T"), Err(SizeError::TooLarge));
        assert_eq!(
            parse_size("99999999999999999999999999999999999999999"),
            Err(SizeError::TooLarge)
        );
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(3 << 30), "3.0G");
        assert_eq!(human(512), "512B");
        assert_eq!(human(1536), "1.5K");
    }
}
