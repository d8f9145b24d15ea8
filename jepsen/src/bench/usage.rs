//! What a backend's processes cost the machine: CPU time and memory, read from `/proc`.
//!
//! A backend names its root processes (the cluster's three nodes, PostgreSQL's postmaster,
//! etcd's members); their children count with them (PostgreSQL's backends are the
//! postmaster's children). CPU is user plus system time, including children already reaped;
//! memory is the proportional set size (PSS), so pages that several processes share
//! (PostgreSQL's shared buffers) count once in the sum rather than once per process.
//!
//! Owns reading and summing; never signals or otherwise touches the processes it reads. A
//! process that exits between the listing and the read is skipped: the numbers are samples,
//! not accounts.

use procfs::process::Process;

/// One sample of a set of processes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// CPU time so far (user and system, with reaped children), seconds.
    pub cpu_seconds: f64,
    /// Proportional set size, bytes.
    pub pss_bytes: u64,
}

/// The processes `roots` and their live children, sampled now; `None` when none of `roots` can
/// be read (no `/proc`, or every one has exited).
pub fn sample(roots: &[u32]) -> Option<Usage> {
    if roots.is_empty() {
        return None;
    }
    let ticks = procfs::ticks_per_second() as f64;
    let mut usage = Usage::default();
    let mut read_any = false;
    let mut members: Vec<Process> = Vec::new();
    for &pid in roots {
        let Ok(process) = Process::new(pid as i32) else { continue };
        let Ok(stat) = process.stat() else { continue };
        read_any = true;
        // Children reaped by a root: their time is in its cutime/cstime.
        let reaped = stat.cutime.max(0) + stat.cstime.max(0);
        usage.cpu_seconds += (stat.utime + stat.stime) as f64 / ticks + reaped as f64 / ticks;
        members.push(process);
    }
    if !read_any {
        return None;
    }
    if let Ok(all) = procfs::process::all_processes() {
        for process in all.flatten() {
            let Ok(stat) = process.stat() else { continue };
            if roots.contains(&(stat.ppid as u32)) && !roots.contains(&(stat.pid as u32)) {
                usage.cpu_seconds += (stat.utime + stat.stime) as f64 / ticks;
                members.push(process);
            }
        }
    }
    for process in &members {
        usage.pss_bytes += pss_bytes(process).unwrap_or(0);
    }
    Some(usage)
}

/// This process's own CPU time so far (user and system, without its children: the load
/// generator's cost beside the backends it started), seconds.
pub fn own_cpu_seconds() -> Option<f64> {
    let stat = Process::myself().ok()?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// A process's proportional set size, bytes.
fn pss_bytes(process: &Process) -> Option<u64> {
    let rollup = process.smaps_rollup().ok()?;
    Some(rollup.memory_map_rollup.iter().filter_map(|map| map.extension.map.get("Pss")).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_child_counts_with_its_parent() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30"])
            .spawn()
            .expect("spawn sh");
        // Waits until the child's loop has used some CPU (it then sleeps).
        let child_pid = child.id();
        let child_cpu = || sample(&[child_pid]).map_or(0.0, |usage| usage.cpu_seconds);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child_cpu() < 0.05 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let alone = child_cpu();
        // This process's own time before the sample: the sample can only have more.
        let own = {
            let stat = Process::myself().unwrap().stat().unwrap();
            (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64
        };
        let with_children = sample(&[me]).expect("this process can be read");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(alone >= 0.05, "the child's loop used {alone} s");
        assert!(
            with_children.cpu_seconds >= own + alone - 0.011,
            "{with_children:?} should include the child's {alone} s beside this process's {own} s"
        );
        assert!(with_children.pss_bytes > 0);
        assert_eq!(sample(&[]), None);
    }
}
