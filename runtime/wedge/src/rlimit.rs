//! The open-files limit. systemd and most shells start services with a soft `RLIMIT_NOFILE` of
//! 1024 (for `select(2)`'s sake) and a far higher hard limit; Wedge uses epoll only, so it
//! raises the soft limit to the hard one at start, before any listener opens, and the MQTT
//! broker sizes its connection cap from the result.

/// The current (soft, hard) `RLIMIT_NOFILE`, or `None` if it cannot be read.
pub fn nofile() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and keeps no pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some((limit.rlim_cur, limit.rlim_max))
}

/// What [`raise_nofile`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit now.
    pub after: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. An unlimited hard limit is capped at
/// `fs.nr_open` (the most the kernel allows one process), as `RLIM_INFINITY` is refused.
pub fn raise_nofile() -> std::io::Result<Raised> {
    let (before, hard) = nofile().ok_or_else(std::io::Error::last_os_error)?;
    let target = if hard == libc::RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(1 << 20)
    } else {
        hard
    };
    if target <= before {
        return Ok(Raised {
            before,
            after: before,
            hard,
        });
    }
    let limit = libc::rlimit {
        rlim_cur: target,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Raised {
        before,
        after: target,
        hard,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn raising_ends_at_the_hard_limit() {
        let raised = super::raise_nofile().unwrap();
        let (soft, hard) = super::nofile().unwrap();
        assert_eq!(soft, raised.after);
        assert_eq!(hard, raised.hard);
        assert!(raised.after >= raised.before);
    }
}
