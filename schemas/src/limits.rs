//! Bounds on the sizes a user gives (top-k, widths, node counts, sample points), checked before any
//! allocation: a size is refused with the limit stated in the up-front argument or config check, so
//! that no request ends in an aborted process ("memory allocation of … bytes failed") or hours of
//! work on a typo. The size checks of the stage configs (`check_sizes`) and of the file tools' size
//! flags take their limits from here.

/// Results per query (`--k`, `top_k`): far above any ranking depth anyone evaluates.
pub const MAX_TOP_K: usize = 10_000_000;
/// Widths of embeddings, hashing features and hidden layers.
pub const MAX_DIM: usize = 65_536;
/// Layers, heads, epochs and similar small counts.
pub const MAX_COUNT: usize = 100_000;
/// Sample points of a characteristic function (GraphWave).
pub const MAX_POINTS: usize = 100_000;
/// Nodes of one graph given by id (ids are u32).
pub const MAX_NODES: usize = u32::MAX as usize;

/// `value` within `[min, max]`, or a message naming the option, the value and the range.
pub fn within(name: &str, value: usize, min: usize, max: usize) -> Result<(), String> {
    if value < min || value > max {
        return Err(format!("{name} must be within [{min}, {max}], got {value}"));
    }
    Ok(())
}

/// `value` ≤ `max` (and ≥ 1), or a message naming the option, the value and the limit.
pub fn at_most(name: &str, value: usize, max: usize) -> Result<(), String> {
    within(name, value, 1, max)
}

/// A finite float within `[min, max]`.
pub fn finite_within(name: &str, value: f64, min: f64, max: f64) -> Result<(), String> {
    if !value.is_finite() || value < min || value > max {
        return Err(format!("{name} must be a finite number within [{min}, {max}], got {value}"));
    }
    Ok(())
}

/// The memory one allocation may take: `TGRAG_MAX_BYTES` when set, else three quarters of the
/// machine's memory (`/proc/meminfo`), else 16 GiB.
pub fn memory_budget() -> u64 {
    if let Some(b) = std::env::var("TGRAG_MAX_BYTES").ok().and_then(|v| v.trim().parse::<u64>().ok()) {
        return b;
    }
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<u64>().ok())
    });
    total_kib.map(|k| k * 1024 / 4 * 3).unwrap_or(16 << 30)
}

/// Human-readable bytes (`1.2 TB`).
pub fn bytes(b: u128) -> String {
    let units = ["B", "KB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", units[u]) }
}

/// Refuses an allocation of `elems` items of `elem_bytes` each when it exceeds the memory budget,
/// naming what it is for (`what` says how the size came about: "--num-nodes 1000000000 × 150 columns").
pub fn check_alloc(what: &str, elems: u128, elem_bytes: u128) -> Result<(), String> {
    let need = elems.saturating_mul(elem_bytes);
    let budget = u128::from(memory_budget());
    if need > budget {
        return Err(format!(
            "{what} needs {} of memory, more than the {} this process may use (set TGRAG_MAX_BYTES to raise the limit)",
            bytes(need),
            bytes(budget)
        ));
    }
    Ok(())
}

/// A vector of `len` copies of `fill`, or an error instead of an abort when the memory is not there.
pub fn try_vec<T: Clone>(what: &str, len: usize, fill: T) -> Result<Vec<T>, String> {
    check_alloc(what, len as u128, std::mem::size_of::<T>().max(1) as u128)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| format!("{what}: could not allocate {} items", len))?;
    v.resize(len, fill);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_the_option_value_and_limit() {
        assert!(at_most("top_k", 100, MAX_TOP_K).is_ok());
        let e = at_most("top_k", 1_000_000_000_000, MAX_TOP_K).expect_err("too large");
        assert!(e.contains("top_k") && e.contains("10000000") && e.contains("1000000000000"), "{e}");
        assert!(at_most("top_k", 0, 5).is_err());
        assert!(finite_within("k1", f64::INFINITY, 0.0, 100.0).is_err());
        assert!(finite_within("k1", f64::NAN, 0.0, 100.0).is_err());
        assert!(finite_within("k1", 1.2, 0.0, 100.0).is_ok());
    }

    #[test]
    fn an_allocation_beyond_the_budget_is_an_error_not_an_abort() {
        let e = check_alloc("graphwave output", 1_000_000_000u128 * 150, 8).expect_err("1.2 TB");
        assert!(e.contains("1.2 TB") && e.contains("graphwave output"), "{e}");
        assert!(check_alloc("small", 1000, 8).is_ok());
        assert!(try_vec("huge", usize::MAX / 2, 0u64).is_err());
        assert_eq!(try_vec("small", 3, 7u8).expect("small"), vec![7, 7, 7]);
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_500_000), "1.5 MB");
    }
}
