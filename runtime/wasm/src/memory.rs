//! Guest memory: each instance's limit, and the node-wide budget those limits count against.
//!
//! Every module's manifest asks for a memory limit (`limits.memory-mib`). A deploy reserves
//! that much of the node's guest budget (`wedge.modules.memoryBudgetMiB`) before any guest
//! code runs, and is refused when the reservations would exceed it; so the sum of what guests
//! can ever touch is bounded by configuration, and a module never fails mid-call because a
//! neighbour grew. The per-instance limit is enforced by a wasmtime `ResourceLimiter` that
//! sees every memory a store creates or grows and counts their total (a component may have
//! several memories; the limit covers them all).
//!
//! Why a `ResourceLimiter` and reservations rather than the pooling allocator's limits: the
//! pool's `max_memory_size` is one per-memory cap fixed for the whole engine, and its totals
//! count slots, not bytes; neither can say "these modules together may use 512 MiB", nor
//! differ per module.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::WasmError;

const MIB: u64 = 1024 * 1024;

/// The node's guest memory budget and the reservations held against it.
#[derive(Debug)]
pub struct MemoryBudget {
    limit_mib: u64,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    next: u64,
    /// Reservation id -> (module name, MiB).
    entries: BTreeMap<u64, (String, u64)>,
}

impl Held {
    /// MiB reserved: per module name the largest of its reservations (an upgrade's new
    /// version replaces the old one), summed over names.
    fn total(&self, except: Option<&str>) -> u64 {
        let mut per_name: BTreeMap<&str, u64> = BTreeMap::new();
        for (name, mib) in self.entries.values() {
            if Some(name.as_str()) == except {
                continue;
            }
            let slot = per_name.entry(name).or_default();
            *slot = (*slot).max(*mib);
        }
        per_name.values().sum()
    }
}

/// A module's share of the budget, released when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    id: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.lock().entries.remove(&self.id);
    }
}

impl MemoryBudget {
    /// A budget of `limit_mib` MiB for every guest of the node together.
    pub fn new(limit_mib: u32) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit_mib: u64::from(limit_mib),
            held: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Only map updates happen under this lock; a poisoned one is still consistent.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `mib` MiB for module `name`, or refuses saying how much is left. Another
    /// reservation of the same name (the version being replaced) does not count twice.
    pub fn reserve(self: &Arc<Self>, name: &str, mib: u32) -> Result<Reservation, WasmError> {
        let mut held = self.lock();
        let others = held.total(Some(name));
        let own = held
            .entries
            .values()
            .filter(|(n, _)| n == name)
            .map(|(_, m)| *m)
            .max()
            .unwrap_or(0);
        let wanted = u64::from(mib).max(own);
        if others + wanted > self.limit_mib {
            return Err(WasmError::MemoryBudget {
                module: name.to_owned(),
                asked_mib: u64::from(mib),
                reserved_mib: others,
                budget_mib: self.limit_mib,
            });
        }
        held.next += 1;
        let id = held.next;
        held.entries.insert(id, (name.to_owned(), u64::from(mib)));
        Ok(Reservation {
            budget: self.clone(),
            id,
        })
    }

    /// MiB reserved now.
    pub fn reserved_mib(&self) -> u64 {
        self.lock().total(None)
    }

    /// The budget in MiB.
    pub fn limit_mib(&self) -> u64 {
        self.limit_mib
    }
}

/// One store's limiter: the total of its memories stays within the module's limit.
pub(crate) struct StoreMemory {
    limit_bytes: u64,
    used_bytes: u64,
}

impl StoreMemory {
    /// A limiter for a module limited to `mib` MiB.
    pub(crate) fn new(mib: u32) -> StoreMemory {
        StoreMemory {
            limit_bytes: u64::from(mib) * MIB,
            used_bytes: 0,
        }
    }
}

impl wasmtime::ResourceLimiter for StoreMemory {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grown = self
            .used_bytes
            .saturating_add((desired as u64).saturating_sub(current as u64));
        if grown > self.limit_bytes {
            // A trap, not a failed `memory.grow`: the guest cannot go on past its limit.
            return Err(wasmtime::format_err!(
                "forcing trap when growing memory to {desired} bytes: the module's memory limit is {} bytes",
                self.limit_bytes
            ));
        }
        self.used_bytes = grown;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn reservations_count_against_the_budget() {
        let budget = MemoryBudget::new(512);
        let a = budget.reserve("a", 240).unwrap();
        let _b = budget.reserve("b", 240).unwrap();
        let refused = budget.reserve("c", 240).unwrap_err().to_string();
        assert!(refused.contains("memoryBudgetMiB"), "{refused}");
        assert!(refused.contains("480 MiB"), "{refused}");
        // An upgrade of `a` replaces its share instead of adding to it.
        let a2 = budget.reserve("a", 250).unwrap();
        assert_eq!(budget.reserved_mib(), 490);
        drop(a);
        drop(a2);
        assert_eq!(budget.reserved_mib(), 240);
        budget.reserve("c", 240).unwrap();
    }

    #[test]
    fn a_store_limit_covers_all_its_memories() {
        let mut m = StoreMemory::new(1);
        assert!(m.memory_growing(0, 600 * 1024, None).unwrap());
        assert!(m.memory_growing(0, 600 * 1024, None).is_err());
        assert!(m.memory_growing(0, 400 * 1024, None).unwrap());
    }
}
