//! Connection slots for a listener any local user can reach (the admin API's TCP port, the
//! kubelet read-only port): a cap on open connections where, at the cap, the connection idle
//! the longest is closed to make room instead of the new one waiting.
//!
//! A plain semaphore lets whoever opens `cap` sockets and sends nothing hold the port until
//! they close; here an idle socket is worth nothing at the cap, and a connection that is
//! answering a request (busy) is never cut.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a new connection waits for an evicted one's slot to be freed.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// The open connections of one listener.
#[derive(Debug)]
pub struct ConnectionSlots {
    cap: usize,
    inner: Mutex<SlotTable>,
    freed: Notify,
}

#[derive(Debug, Default)]
struct SlotTable {
    next: u64,
    open: HashMap<u64, SlotState>,
}

#[derive(Debug)]
struct SlotState {
    /// Requests being answered on it (0 = idle, evictable).
    in_flight: u32,
    /// Since when it is idle (accepted, or its last answer written).
    idle_since: Instant,
    kill: CancellationToken,
}

/// What [`ConnectionSlots::make_room`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// Under the cap: nothing closed.
    Free,
    /// The connection idle the longest was closed for the new one.
    Evicted,
    /// Every connection is busy: the new one should be closed.
    Full,
}

impl ConnectionSlots {
    /// Slots for at most `cap` connections (at least one).
    pub fn new(cap: usize) -> Arc<ConnectionSlots> {
        Arc::new(ConnectionSlots {
            cap: cap.max(1),
            inner: Mutex::new(SlotTable::default()),
            freed: Notify::new(),
        })
    }

    fn table(&self) -> MutexGuard<'_, SlotTable> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.table().open.len()
    }

    /// True when no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Under the cap: at once. At the cap: closes the connection idle the longest and waits
    /// (at most a second) for its slot; [`Room::Full`] when every connection is busy.
    pub async fn make_room(&self) -> Room {
        if self.len() < self.cap {
            return Room::Free;
        }
        if !self.evict_oldest_idle() {
            return Room::Full;
        }
        let deadline = tokio::time::Instant::now() + EVICTION_WAIT;
        loop {
            let freed = self.freed.notified();
            if self.len() < self.cap {
                return Room::Evicted;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return if self.len() < self.cap {
                    Room::Evicted
                } else {
                    Room::Full
                };
            }
        }
    }

    /// Takes a slot for a new connection (call [`ConnectionSlots::make_room`] first).
    pub fn add(self: &Arc<Self>) -> Slot {
        let kill = CancellationToken::new();
        let mut table = self.table();
        table.next += 1;
        let id = table.next;
        table.open.insert(
            id,
            SlotState {
                in_flight: 0,
                idle_since: Instant::now(),
                kill: kill.clone(),
            },
        );
        Slot {
            slots: self.clone(),
            id,
            kill,
        }
    }

    /// Cancels the idle connection with the oldest `idle_since`; false when none is idle.
    pub fn evict_oldest_idle(&self) -> bool {
        let mut table = self.table();
        let victim = table
            .open
            .iter()
            .filter(|(_, s)| s.in_flight == 0 && !s.kill.is_cancelled())
            .min_by_key(|(_, s)| s.idle_since)
            .map(|(id, _)| *id);
        match victim.and_then(|id| table.open.get_mut(&id)) {
            Some(state) => {
                state.kill.cancel();
                true
            }
            None => false,
        }
    }

    fn set_busy(&self, id: u64, busy: bool) {
        let mut table = self.table();
        if let Some(state) = table.open.get_mut(&id) {
            if busy {
                state.in_flight += 1;
            } else {
                state.in_flight = state.in_flight.saturating_sub(1);
                if state.in_flight == 0 {
                    state.idle_since = Instant::now();
                }
            }
        }
    }
}

/// One connection's place in its listener's [`ConnectionSlots`]; freed on drop.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<ConnectionSlots>,
    id: u64,
    kill: CancellationToken,
}

impl Slot {
    /// Cancelled when the connection is evicted: its server should drop it then.
    pub fn evicted(&self) -> CancellationToken {
        self.kill.clone()
    }

    /// Marks a request in flight until the guard drops (carry it in the response body so the
    /// connection stays busy until the answer is written).
    pub fn busy(self: &Arc<Self>) -> BusyGuard {
        self.slots.set_busy(self.id, true);
        let slot = self.clone();
        BusyGuard::new(move || slot.slots.set_busy(slot.id, false))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.table().open.remove(&self.id);
        self.slots.freed.notify_one();
    }
}

/// Runs its action once, when dropped.
pub struct BusyGuard(Option<Box<dyn FnOnce() + Send + Sync>>);

impl std::fmt::Debug for BusyGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BusyGuard")
    }
}

impl BusyGuard {
    /// A guard that calls `on_drop` when it goes.
    pub fn new(on_drop: impl FnOnce() + Send + Sync + 'static) -> BusyGuard {
        BusyGuard(Some(Box::new(on_drop)))
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if let Some(action) = self.0.take() {
            action();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_idle_connection_is_evicted_and_busy_ones_never() {
        let slots = ConnectionSlots::new(2);
        let first = Arc::new(slots.add());
        std::thread::sleep(Duration::from_millis(2));
        let second = Arc::new(slots.add());
        let _busy = second.busy();
        assert!(slots.evict_oldest_idle());
        assert!(first.evicted().is_cancelled());
        assert!(!second.evicted().is_cancelled());
        // The evicted one is not picked twice; the busy one never.
        assert!(!slots.evict_oldest_idle());
        drop(first);
        assert_eq!(slots.make_room().await, Room::Free);
    }

    #[tokio::test]
    async fn at_the_cap_an_idle_slot_makes_room_and_busy_ones_do_not() {
        let slots = ConnectionSlots::new(1);
        let idle = slots.add();
        let kill = idle.evicted();
        let closer = tokio::spawn(async move {
            kill.cancelled().await;
            drop(idle);
        });
        assert_eq!(slots.make_room().await, Room::Evicted);
        closer.await.expect("closer");
        let busy = Arc::new(slots.add());
        let _guard = busy.busy();
        assert_eq!(slots.make_room().await, Room::Full);
    }
}
