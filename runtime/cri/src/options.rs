//! How long CRI calls may take.

use std::time::Duration;

/// Deadlines for CRI calls. A runtime that hangs (a stuck shim, a dead CNI plugin) must not
/// stall edged's pod workers for ever, so every call carries one; the defaults follow kubelet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriOptions {
    /// Dialling the socket and the `Version` call that proves it is a CRI runtime. Short, so a
    /// wrong endpoint is reported at once.
    pub connect_timeout: Duration,
    /// Calls that change things (run/stop/remove sandbox, create/start/stop/remove container,
    /// exec set-up): kubelet's `runtimeRequestTimeout`, 2 minutes. StopContainer adds its grace
    /// period and ExecSync its command timeout on top, as kubelet does.
    pub call_timeout: Duration,
    /// Calls that only read (version, status, lists, stats, image status): the runtime answers
    /// these from memory, so a slow answer means trouble.
    pub query_timeout: Duration,
    /// PullImage. Kubelet sets no deadline (a large image over a slow edge link takes long);
    /// we bound it anyway, so a pull stuck on a dead registry connection ends.
    pub pull_timeout: Duration,
}

impl Default for CriOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(120),
            query_timeout: Duration::from_secs(30),
            pull_timeout: Duration::from_secs(3600),
        }
    }
}
