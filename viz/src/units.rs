//! Human-readable durations and sizes, shared by the table, the charts and the hint.

/// `830 ns`, `41.2 µs`, `12.3 ms`, `1.23 s`: three significant digits in the largest fitting unit.
pub(crate) fn duration(ns: u64) -> String {
    if ns == 0 {
        return "0".into();
    }
    let ns = ns as f64;
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    format!("{} {unit}", sig3(v))
}

/// Three significant digits, no trailing exponent: 123, 12.3, 1.23.
pub(crate) fn sig3(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Any finite number in three significant digits (integers whole), no trailing zeros:
/// `0.0312`, `-1.5`, `2048`, and `1.23e-5` or `4.56e7` far from 1.
pub(crate) fn value(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || !a.is_finite() {
        return format!("{v}");
    }
    if !(1e-3..1e5).contains(&a) {
        return format!("{v:.2e}").replace(".00e", "e");
    }
    let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `s` cut to `max` characters, ending in `…` when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(duration(0), "0");
        assert_eq!(duration(830), "830 ns");
        assert_eq!(duration(41_230), "41.2 µs");
        assert_eq!(duration(12_345_678), "12.3 ms");
        assert_eq!(duration(1_234_000_000), "1.23 s");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(value(0.03125), "0.0312");
        assert_eq!(value(0.01), "0.01");
        assert_eq!(value(-1.5), "-1.5");
        assert_eq!(value(2048.0), "2048");
        assert_eq!(value(12.345), "12.3");
        assert_eq!(value(0.0000123), "1.23e-5");
        assert_eq!(value(1e6), "1e6");
        assert_eq!(value(0.0), "0");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
