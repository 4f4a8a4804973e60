//! CPU time of the processes under test, from their own accounting (`/proc/<pid>/stat`: user
//! plus system time of all their threads), read before and after a run, so that a report can
//! give each process's CPU time per call.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};

/// A process to account for: a name for the report, and its pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub name: String,
    pub pid: u32,
}

/// Parses `NAME=PID`.
pub fn parse_watched(text: &str) -> Result<Watched, String> {
    let (name, pid) = text.split_once('=').ok_or_else(|| format!("`{text}` is not NAME=PID"))?;
    let pid = pid.trim().parse().map_err(|_| format!("`{pid}` in `{text}` is not a process id"))?;
    if name.trim().is_empty() {
        return Err(format!("`{text}` has no name before `=`"));
    }
    Ok(Watched { name: name.trim().to_owned(), pid })
}

/// The CPU time a process has used so far (user + system, all threads).
pub fn used(pid: u32) -> anyhow::Result<Duration> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
    cpu_of_stat(&stat, ticks_per_second()).with_context(|| format!("parsing /proc/{pid}/stat"))
}

/// utime and stime, fields 14 and 15 of `/proc/<pid>/stat`, counted after the command name
/// (which is in parentheses and may itself hold spaces or parentheses).
fn cpu_of_stat(stat: &str, ticks_per_second: u64) -> anyhow::Result<Duration> {
    let Some(close) = stat.rfind(')') else { bail!("no `)` after the command name") };
    // After `) `: state is field 3, so utime (14) and stime (15) are the 12th and 13th here.
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let (Some(utime), Some(stime)) = (fields.get(11), fields.get(12)) else { bail!("fewer than 15 fields") };
    let ticks: u64 = utime.parse::<u64>().context("utime")? + stime.parse::<u64>().context("stime")?;
    Ok(Duration::from_secs_f64(ticks as f64 / ticks_per_second as f64))
}

/// The unit of the times in `/proc/<pid>/stat` (`USER_HZ`), as `getconf CLK_TCK` tells it; 100
/// (what Linux uses on every common architecture) when it cannot be asked.
fn ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|&ticks: &u64| ticks > 0)
            .unwrap_or(100)
    })
}

/// Each watched process's CPU time now.
pub fn snapshot(watched: &[Watched]) -> anyhow::Result<Vec<Duration>> {
    watched.iter().map(|process| used(process.pid).with_context(|| format!("CPU time of {}", process.name))).collect()
}

/// Milliseconds of CPU per call of each process between two snapshots, and their sum as `total`.
pub fn per_call(watched: &[Watched], before: &[Duration], after: &[Duration], calls: u64) -> BTreeMap<String, f64> {
    let mut per_call = BTreeMap::new();
    if calls == 0 {
        return per_call;
    }
    let mut total = 0.0;
    for ((process, before), after) in watched.iter().zip(before).zip(after) {
        let ms = after.saturating_sub(*before).as_secs_f64() * 1000.0 / calls as f64;
        total += ms;
        per_call.insert(process.name.clone(), (ms * 1000.0).round() / 1000.0);
    }
    per_call.insert("total".to_owned(), (total * 1000.0).round() / 1000.0);
    per_call
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 5 0 100 0 0";
        assert_eq!(cpu_of_stat(stat, 100).unwrap(), Duration::from_secs(3));
        assert!(cpu_of_stat("4242 (x) S 1", 100).is_err());
    }

    #[test]
    fn our_own_process_has_used_some_cpu() {
        let mut spin = 0_u64;
        for i in 0..20_000_000_u64 {
            spin = spin.wrapping_add(i ^ (spin >> 3));
        }
        assert!(spin != 1);
        assert!(used(std::process::id()).unwrap() > Duration::ZERO);
    }

    #[test]
    fn watched_processes_are_name_equals_pid() {
        assert_eq!(parse_watched("edge=123").unwrap(), Watched { name: "edge".into(), pid: 123 });
        for bad in ["edge", "=12", "edge=x"] {
            assert!(parse_watched(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn per_call_divides_and_sums() {
        let watched = [Watched { name: "a".into(), pid: 1 }, Watched { name: "b".into(), pid: 2 }];
        let before = [Duration::from_millis(100), Duration::from_millis(0)];
        let after = [Duration::from_millis(300), Duration::from_millis(100)];
        let got = per_call(&watched, &before, &after, 100);
        assert_eq!(got["a"], 2.0);
        assert_eq!(got["b"], 1.0);
        assert_eq!(got["total"], 3.0);
    }
}
