//! Human sizes: `8G`, `512M`, `4096` in, `8.0G` out (powers of 1024, as zfs prints them).

use anyhow::{bail, Result};

pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let n: f64 = num.parse().map_err(|_| {
        anyhow::anyhow!("size '{s}': expected a number with an optional K, M, G or T suffix")
    })?;
    let mult: u64 = match unit.to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => bail!("size '{s}': unknown unit '{unit}' (use K, M, G or T)"),
    };
    if n < 0.0 || !n.is_finite() {
        bail!("size '{s}' must be positive");
    }
    Ok((n * mult as f64) as u64)
}

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
    fn sizes() {
        assert_eq!(parse_size("8G").expect("valid"), 8 << 30);
        assert_eq!(parse_size("4096").expect("valid"), 4096);
        assert_eq!(parse_size("1.5k").expect("valid"), 1536);
        assert!(parse_size("12Q").is_err());
        assert_eq!(human(3 << 30), "3.0G");
    }
}
