//! Numbers as Redis reads and writes them: integers strictly (no sign but `-`, no spaces, no
//! leading zeros), floats as `strtod` does (with `inf`), doubles in replies as Redis prints them.

use super::reply::{errors, Reply};

/// The integer `text` spells, as Redis's `string2ll` accepts it.
pub(crate) fn int(text: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?;
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') || s == "-0" {
        return None;
    }
    s.parse().ok()
}

/// An integer argument, or the error Redis gives for one that is not.
pub(crate) fn int_arg(text: &[u8]) -> Result<i64, Reply> {
    int(text).ok_or_else(errors::not_integer)
}

/// The float `text` spells (`strtod`, with `inf`, `+inf` and `-inf`; never NaN).
pub(crate) fn float(text: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(text).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let value: f64 = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

/// A float argument, or the error Redis gives for one that is not.
pub(crate) fn float_arg(text: &[u8]) -> Result<f64, Reply> {
    float(text).ok_or_else(errors::not_float)
}

/// A double as Redis 7.0 prints it in a reply: a whole number as an integer, the infinities
/// as `inf` / `-inf`, any other with 17 significant digits (`%.17g`).
pub(crate) fn double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    if value.fract() == 0.0 && value.abs() < 1e17 {
        return format!("{}", value as i64);
    }
    g17(value)
}

/// `%.17g`.
fn g17(value: f64) -> String {
    let exp = if value == 0.0 {
        0
    } else {
        value.abs().log10().floor() as i32
    };
    if !(-5..17).contains(&exp) {
        let s = format!("{value:.16e}");
        let (mantissa, e) = s.split_once('e').unwrap();
        let mantissa = trim_zeros(mantissa);
        let e: i32 = e.parse().unwrap();
        let sign = if e < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", e.abs())
    } else {
        let decimals = (16 - exp).max(0) as usize;
        trim_zeros(&format!("{value:.decimals$}")).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_strictly() {
        assert_eq!(int(b"42"), Some(42));
        assert_eq!(int(b"-7"), Some(-7));
        for bad in [
            &b"+1"[..],
            b" 1",
            b"01",
            b"-0",
            b"1.0",
            b"",
            b"-",
            b"99999999999999999999",
        ] {
            assert_eq!(int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn doubles_print_as_redis_prints_them() {
        assert_eq!(double(3.0), "3");
        assert_eq!(double(-1700000000000.0), "-1700000000000");
        assert_eq!(double(1.5), "1.5");
        assert_eq!(double(0.1), "0.10000000000000001");
        assert_eq!(double(f64::INFINITY), "inf");
    }
}
