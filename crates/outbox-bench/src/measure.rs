//! Readings taken around a timed phase: host CPU (all cores, from `/proc/stat`), this
//! process's CPU and its waited-for children's (from `/proc/self/stat`), and percentiles.

use std::time::Duration;

/// Busy and total jiffies of all cores.
#[derive(Debug, Clone, Copy)]
pub struct HostCpu {
    busy: u64,
    total: u64,
}

impl HostCpu {
    /// Reads `/proc/stat` now (zero if it cannot be read).
    pub fn now() -> HostCpu {
        let fields: Vec<u64> = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned))
            .map(|line| {
                line.split_whitespace()
                    .skip(1)
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let total: u64 = fields.iter().sum();
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        HostCpu {
            busy: total.saturating_sub(idle),
            total,
        }
    }

    /// Busy share of all cores since `self`, in percent (100 = every core busy).
    pub fn busy_pct_since(self) -> f64 {
        let now = HostCpu::now();
        let total = now.total.saturating_sub(self.total).max(1);
        100.0 * now.busy.saturating_sub(self.busy) as f64 / total as f64
    }
}

/// CPU seconds used by this process plus its children that have been waited for.
pub fn process_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at field 3.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14-17, i.e. 11-14 after the name.
    let ticks: f64 = (11..=14)
        .filter_map(|i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    ticks / clock_ticks_per_sec()
}

fn clock_ticks_per_sec() -> f64 {
    // USER_HZ is 100 on every Linux architecture this runs on.
    100.0
}

/// The `q` quantile (0..=1) of `values`, nearest rank; `None` when empty.
pub fn quantile(values: &[Duration], q: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Milliseconds, for reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&values, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&values, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&values, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn cpu_readings_move_forward() {
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        // Parsing that silently failed would read zero here.
        assert!(process_cpu_secs() > 0.0);
        let pct = HostCpu::now().busy_pct_since();
        assert!((0.0..=100.0).contains(&pct));
    }
}
