//! The standard `process_*` metrics of this process (server or agent), read from `/proc/self` at each
//! scrape (Linux; elsewhere none are emitted), with the names and meanings of the Prometheus
//! client libraries: CPU time, resident and virtual memory, open and maximum file descriptors,
//! threads, start time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// `/proc` reports CPU times and start times in USER_HZ, fixed at 100 on Linux.
const USER_HZ: f64 = 100.0;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessSample {
    /// User plus system CPU time.
    pub cpu_seconds: f64,
    /// Resident memory.
    pub resident_bytes: f64,
    /// Virtual memory.
    pub virtual_bytes: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit of open file descriptors (infinite when unlimited).
    pub max_fds: f64,
    /// OS threads.
    pub threads: f64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

impl ProcessSample {
    /// Reads `/proc/self`; `None` where there is no procfs.
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        Self::parse(&stat, &status, &limits, &boot, open_fds)
    }

    /// Parses the contents of `/proc/self/stat`, `/proc/self/status`, `/proc/self/limits`,
    /// `/proc/stat` and the count of `/proc/self/fd`; `None` when a field is missing.
    pub fn parse(
        stat: &str,
        status: &str,
        limits: &str,
        boot: &str,
        open_fds: usize,
    ) -> Option<Self> {
        // The command name (field 2) may hold spaces and parentheses: fields start after the
        // last `)`, with field 3 (state) first.
        let fields: Vec<&str> = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .collect();
        let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
        let kib = |key: &str| -> Option<f64> {
            let line = status.lines().find(|l| l.starts_with(key))?;
            let value: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(value * 1024.0)
        };
        let threads = status
            .lines()
            .find(|l| l.starts_with("Threads:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))?
            .split_whitespace()
            .nth(3)
            .and_then(|soft| soft.parse().ok())
            .unwrap_or(f64::INFINITY);
        let boot_time: f64 = boot
            .lines()
            .find(|l| l.starts_with("btime "))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(Self {
            cpu_seconds: (field(14)? + field(15)?) / USER_HZ,
            resident_bytes: kib("VmRSS:").unwrap_or(0.0),
            virtual_bytes: field(23)?,
            open_fds: open_fds as f64,
            max_fds,
            threads,
            start_time_seconds: boot_time + field(22)? / USER_HZ,
        })
    }
}

/// Encodes the `process_*` metrics on each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(sample) = ProcessSample::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(sample.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent.",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        for (name, help, unit, value) in [
            (
                "process_resident_memory",
                "Resident memory size.",
                Some(Unit::Bytes),
                sample.resident_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size.",
                Some(Unit::Bytes),
                sample.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors.",
                None,
                sample.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors (soft limit).",
                None,
                sample.max_fds,
            ),
            ("process_threads", "OS threads.", None, sample.threads),
            (
                "process_start_time",
                "Start time of the process since the Unix epoch.",
                Some(Unit::Seconds),
                sample.start_time_seconds,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ProcessSample;

    #[test]
    fn proc_files_are_read_by_field_even_with_a_parenthesised_command_name() {
        let stat = "4242 (troupe (server)) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 2048 18446744073709551615";
        let status = "Name:\ttroupe-server\nVmRSS:\t  2048 kB\nThreads:\t7\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\n";
        let sample = ProcessSample::parse(stat, status, limits, boot, 12).unwrap();
        assert_eq!(sample.cpu_seconds, 3.0);
        assert_eq!(sample.resident_bytes, 2048.0 * 1024.0);
        assert_eq!(sample.virtual_bytes, 123_456_789.0);
        assert_eq!(sample.open_fds, 12.0);
        assert_eq!(sample.max_fds, 1024.0);
        assert_eq!(sample.threads, 7.0);
        assert_eq!(sample.start_time_seconds, 1_700_000_010.0);
    }

    #[test]
    fn this_process_can_be_read() {
        let sample = ProcessSample::read().expect("Linux procfs");
        assert!(sample.resident_bytes > 0.0 && sample.threads >= 1.0 && sample.open_fds >= 1.0);
        assert!(sample.start_time_seconds > 1_600_000_000.0);
    }
}
