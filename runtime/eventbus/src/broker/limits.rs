//! The broker's connection cap from the process's file descriptor budget.
//!
//! Every connection costs a descriptor; past the soft `RLIMIT_NOFILE` `accept` fails, and so
//! does everything else in the daemon that opens a file or socket (the store, the admin API,
//! the cloud link). Deriving the cap from the limit in force at start (the binary raises the
//! soft limit to the hard one first) keeps a reserve for the rest of the daemon.

/// Descriptors kept for the rest of the daemon when the cap is derived.
pub const FD_RESERVE: u64 = 512;
/// The derived cap never goes below this (a tiny limit still lets a few clients in).
pub const MIN_DERIVED: u64 = 16;
/// The derived cap never goes above this (each connection also costs memory).
pub const MAX_DERIVED: u64 = 65_536;

/// The connection cap: `configured` when it is not 0, else the soft `RLIMIT_NOFILE` now minus
/// [`FD_RESERVE`], within [`MIN_DERIVED`]..=[`MAX_DERIVED`].
pub fn connection_limit(configured: u32) -> usize {
    if configured != 0 {
        return configured as usize;
    }
    derived(soft_nofile())
}

fn derived(soft: Option<u64>) -> usize {
    let budget = soft.unwrap_or(1024).saturating_sub(FD_RESERVE);
    budget.clamp(MIN_DERIVED, MAX_DERIVED) as usize
}

/// The soft `RLIMIT_NOFILE`, `None` when it cannot be read or is unlimited.
fn soft_nofile() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer to a local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_from_the_soft_limit_with_a_reserve() {
        assert_eq!(connection_limit(7), 7);
        assert_eq!(derived(Some(1024)), 512);
        assert_eq!(derived(Some(100)), 16);
        assert_eq!(derived(Some(1 << 20)), 65_536);
        assert_eq!(derived(None), 512);
        assert!(connection_limit(0) >= 16);
    }
}
