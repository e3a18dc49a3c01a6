//! Kubelet's eviction manager: reads the node's signals every 10 s (kubelet's monitoring
//! period), keeps the pressure conditions the node status and admission use, and evicts one
//! pod per pass when a threshold is met.
//!
//! - **Thresholds**: `evictionHard`, `evictionSoft` with `evictionSoftGracePeriod`,
//!   `evictionMinimumReclaim`, `evictionPressureTransitionPeriod` ([`manager`]).
//! - **Node-level reclaim first**: for a disk signal, every unused image old enough goes
//!   (image GC's own records) before any pod; no pod is evicted when that was enough.
//! - **Which pod**: kubelet's order ([`rank`]), among pods that are neither static nor
//!   already refused; for `memory.available` by the containers' working set, for
//!   `nodefs.available` (and `imagefs.available` when images share the node's disk) by what the
//!   pod wrote under its directory ([`usage`]). Inode and pid pressure raise their conditions
//!   and refuse new pods, but evict none (kubelet ranks those by per-pod inode and process
//!   counts, which edged does not read).
//! - **How**: `Failed` with reason `Evicted` and kubelet's message, a Warning event, killed
//!   with a 1 s grace for a hard threshold and `evictionMaxPodGracePeriod` (or the pod's own,
//!   when shorter) for a soft one; never started again. No second pod goes while the last one's
//!   containers are still being removed.
//!
//! The pass runs in a task of its own ([`pass`]): reading the disk, measuring pods and asking
//! the runtime for memory figures never hold up edged's loop.

pub mod manager;
pub(crate) mod pass;
pub mod rank;
pub mod usage;

pub use manager::{Manager, Observation, Reclaim, Resource};
pub use rank::Candidate;
