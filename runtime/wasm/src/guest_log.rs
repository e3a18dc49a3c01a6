//! Guest log lines: what a guest writes through `wedge:device/log` before it reaches the
//! node's log.
//!
//! A guest is untrusted text: a line is capped (a 1 MiB message must not become 1 MiB of
//! log), its control characters are escaped (a newline in a message must not start a line
//! that looks like the daemon's own), and each module may write only so many lines a second
//! (a token bucket), the rest dropped and counted so an operator sees what was shed.
//!
//! The last [`RECENT_LINES`] lines written are also kept per module (`wedge module logs`),
//! numbered so a reader can ask for what came after the last line it saw.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How guest log lines are limited (`wedge.modules.log*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPolicy {
    /// Longest line kept, in bytes of escaped text; longer ones are cut and marked.
    pub max_line_bytes: usize,
    /// Lines a module may write per second, on average.
    pub lines_per_second: u32,
    /// Lines a module may write in a burst above that rate.
    pub burst: u32,
}

impl Default for LogPolicy {
    fn default() -> LogPolicy {
        LogPolicy {
            max_line_bytes: 4096,
            lines_per_second: 50,
            burst: 200,
        }
    }
}

/// Token bucket state.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
    /// Lines dropped since the last admitted one, reported with it.
    dropped_since: u64,
}

/// How many of a module's lines are kept for `wedge module logs` (each at most the policy's
/// `max_line_bytes`: 4 KiB by default, so 2 MiB at worst per module).
pub const RECENT_LINES: usize = 512;

/// One line a guest wrote, as kept for readers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GuestLogLine {
    /// Its number: 1 for the module's first line, counting on across instances.
    pub seq: u64,
    /// When it was written, Unix ms.
    #[serde(rename = "unixMs")]
    pub unix_ms: u64,
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// The line, escaped and capped as it went to the node's log.
    pub text: String,
}

/// The last lines, oldest first.
#[derive(Debug, Default)]
struct Recent {
    lines: VecDeque<GuestLogLine>,
    last_seq: u64,
}

/// One module's guest log: its policy, rate limiter, counters and last lines. Shared by every
/// instance of the module, so a restart does not refill the bucket or lose the lines.
#[derive(Debug)]
pub(crate) struct GuestLog {
    policy: LogPolicy,
    bucket: Mutex<Bucket>,
    dropped: AtomicU64,
    truncated: AtomicU64,
    recent: Mutex<Recent>,
}

/// What [`GuestLog::admit`] decided.
pub(crate) enum Admit {
    /// Write the line; `dropped` lines were shed just before it.
    Write {
        /// Lines dropped since the last line written.
        dropped: u64,
    },
    /// Over the rate: drop it (counted).
    Drop,
}

impl GuestLog {
    /// A log under `policy`, starting with a full bucket.
    pub(crate) fn new(policy: LogPolicy) -> GuestLog {
        GuestLog {
            policy,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(policy.burst.max(1)),
                refilled: Instant::now(),
                dropped_since: 0,
            }),
            dropped: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            recent: Mutex::default(),
        }
    }

    /// Keeps a written line for readers, forgetting the oldest past [`RECENT_LINES`].
    pub(crate) fn remember(&self, level: &'static str, text: String) {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.last_seq += 1;
        let seq = recent.last_seq;
        if recent.lines.len() == RECENT_LINES {
            recent.lines.pop_front();
        }
        recent.lines.push_back(GuestLogLine {
            seq,
            unix_ms,
            level,
            text,
        });
    }

    /// The kept lines numbered after `after`, oldest first.
    pub(crate) fn lines_after(&self, after: u64) -> Vec<GuestLogLine> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .lines
            .iter()
            .filter(|l| l.seq > after)
            .cloned()
            .collect()
    }

    /// Takes a token for one line, or counts it as dropped.
    pub(crate) fn admit(&self) -> Admit {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(b.refilled).as_secs_f64();
        b.refilled = now;
        let cap = f64::from(self.policy.burst.max(1));
        b.tokens = (b.tokens + elapsed * f64::from(self.policy.lines_per_second)).min(cap);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Admit::Write {
                dropped: std::mem::take(&mut b.dropped_since),
            }
        } else {
            b.dropped_since += 1;
            self.dropped.fetch_add(1, Ordering::Relaxed);
            Admit::Drop
        }
    }

    /// `message` made safe for one log line: control characters escaped (`\n`, `\r`, `\t`,
    /// others as `\u{..}`), cut at the policy's length with a marker saying how long it was.
    pub(crate) fn render(&self, message: &str) -> String {
        let (text, cut) = escape_capped(message, self.policy.max_line_bytes);
        if cut {
            self.truncated.fetch_add(1, Ordering::Relaxed);
        }
        text
    }

    /// Lines dropped by the rate limit, ever.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Lines cut at the length cap, ever.
    pub(crate) fn truncated(&self) -> u64 {
        self.truncated.load(Ordering::Relaxed)
    }
}

/// Escapes `message` into at most about `max` bytes; true when it had to be cut. Only the
/// part kept is examined, so a huge message costs no more than a short one.
pub(crate) fn escape_capped(message: &str, max: usize) -> (String, bool) {
    let mut out = String::with_capacity(message.len().min(max) + 48);
    for c in message.chars() {
        if out.len() >= max {
            let _ = write!(out, "…[truncated: {} bytes in all]", message.len());
            return (out, true);
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    (out, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        let (text, cut) = escape_capped("a\nINFO forged\r\tb\u{1b}[31m\u{2028}", 100);
        assert_eq!(text, "a\\nINFO forged\\r\\tb\\u{1b}[31m\\u{2028}");
        assert!(!cut);
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        let big = "x".repeat(1 << 20);
        let (text, cut) = escape_capped(&big, 4096);
        assert!(cut);
        assert!(text.len() < 4096 + 48, "{}", text.len());
        assert!(
            text.ends_with("…[truncated: 1048576 bytes in all]"),
            "{text}"
        );
        let (text, cut) = escape_capped("ééé", 3);
        assert!(cut && text.starts_with("éé"), "{text}");
    }

    #[test]
    fn the_last_lines_are_kept_numbered() {
        let log = GuestLog::new(LogPolicy::default());
        for i in 0..RECENT_LINES + 10 {
            log.remember("info", format!("line {i}"));
        }
        let all = log.lines_after(0);
        assert_eq!(all.len(), RECENT_LINES);
        assert_eq!(all[0].seq, 11);
        assert_eq!(all[0].text, "line 10");
        let last = all.last().unwrap().seq;
        assert!(log.lines_after(last).is_empty());
        assert_eq!(log.lines_after(last - 2).len(), 2);
    }

    #[test]
    fn the_rate_limit_drops_and_counts() {
        let log = GuestLog::new(LogPolicy {
            max_line_bytes: 10,
            lines_per_second: 1,
            burst: 3,
        });
        let written = (0..10)
            .filter(|_| matches!(log.admit(), Admit::Write { .. }))
            .count();
        assert_eq!(written, 3);
        assert_eq!(log.dropped(), 7);
    }
}
