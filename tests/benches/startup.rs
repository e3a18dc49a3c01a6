//! Start-to-healthy time, idle resident memory and stop time of the real `wedge` binary, on
//! embedded defaults (no cloud) with a fresh data directory each run.
//!
//! Run: `cargo build --release -p wedge && cargo bench -p wedge-tests --bench startup [-- RUNS]`

use std::time::{Duration, Instant};

use wedge_tests::{Daemon, http_get};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let (mut ready, mut rss, mut stop) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let data = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let (mut wedge, admin) = Daemon::run_local(data.path(), &[]).unwrap();
        loop {
            if let Ok((200, _)) = http_get(admin, "/healthz") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{}",
                wedge.log()
            );
            std::thread::sleep(Duration::from_micros(500));
        }
        ready.push(started.elapsed());
        std::thread::sleep(Duration::from_secs(1));
        rss.push(rss_kib(wedge.pid()));
        let stopping = Instant::now();
        wedge.stop(libc::SIGTERM, Duration::from_secs(5)).unwrap();
        stop.push(stopping.elapsed());
    }
    ready.sort();
    rss.sort();
    stop.sort();
    let mid = runs / 2;
    println!(
        "wedge run ({runs} runs): start-to-healthy median {:.1} ms (min {:.1}, max {:.1}); \
         idle RSS median {:.1} MB (max {:.1}); SIGTERM-to-exit median {:.1} ms",
        ready[mid].as_secs_f64() * 1e3,
        ready[0].as_secs_f64() * 1e3,
        ready[runs - 1].as_secs_f64() * 1e3,
        rss[mid] as f64 / 1024.0,
        rss[runs - 1] as f64 / 1024.0,
        stop[mid].as_secs_f64() * 1e3,
    );
}
