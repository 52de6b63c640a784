//! The ask deadlines of one system: a coarse hashed timer wheel that one tokio task ticks.
//!
//! Every ask used to arm a tokio timer of its own (a registration in tokio's timer wheel on the
//! first poll, a removal on drop, a clock read each time). Asks almost always finish long
//! before their deadline, so here an ask only records its deadline, as a tick of
//! [`GRANULARITY`], in a slot of a per-system wheel, and removes it when it ends; one ticker
//! task wakes once per tick while any ask is pending and wakes the asks whose deadline has
//! passed.
//!
//! # Precision
//! An ask's deadline is rounded up to the next tick, and the ticker processes a tick once its
//! time has come, so a timeout fires no earlier than asked and at most about one
//! [`GRANULARITY`] (plus the ticker's scheduling delay) later.
//!
//! # No residue
//! An entry is owned by its ask: the ask removes it when it ends, however it ends (reply, no
//! reply, timeout, or the future dropped). The ticker only marks an entry expired and wakes its
//! ask. The ticker stops after [`IDLE_TICKS`] ticks with nothing pending and then gives the
//! wheel's memory back, so a burst of a million asks leaves nothing behind.

use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The width of one tick: the precision of ask timeouts.
pub(crate) const GRANULARITY: Duration = Duration::from_millis(5);

/// Slots in the wheel (a power of two). A deadline further than this many ticks away waits in
/// its slot for more than one turn.
const SLOTS: usize = 256;

/// The ticker stops after this many consecutive ticks with no ask pending (one second).
const IDLE_TICKS: u64 = 200;

/// The deadline wheel of one system.
pub(crate) struct AskDeadlines {
    wheel: Mutex<Wheel>,
    /// Tick `t` is `origin + t * GRANULARITY` on tokio's clock (paused clocks included).
    origin: Instant,
    runtime: tokio::runtime::Handle,
}

/// The handle an ask keeps to its entry. Not `Clone`: exactly one owner removes the entry.
#[derive(Debug)]
pub(crate) struct DeadlineKey(u32);

struct Wheel {
    entries: Vec<Entry>,
    /// Indices of unused entries.
    free: Vec<u32>,
    /// Entry indices by deadline tick modulo [`SLOTS`]; empty until the first ask.
    slots: Vec<Vec<u32>>,
    /// The last tick processed.
    cursor: u64,
    /// Entries that are neither free nor expired.
    pending: usize,
    /// Whether a ticker task is running.
    ticking: bool,
}

#[derive(Default)]
struct Entry {
    deadline: u64,
    /// Where this entry's index sits in its slot, while it waits there.
    at: u32,
    waker: Option<Waker>,
    state: EntryState,
}

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
enum EntryState {
    #[default]
    Free,
    Waiting,
    Expired,
}

impl std::fmt::Debug for AskDeadlines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wheel = self.wheel.lock();
        f.debug_struct("AskDeadlines")
            .field("pending", &wheel.pending)
            .field("ticking", &wheel.ticking)
            .finish()
    }
}

impl AskDeadlines {
    /// A wheel whose ticker runs on `runtime`; call inside it so a paused clock applies.
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(Self {
            wheel: Mutex::new(Wheel {
                entries: Vec::new(),
                free: Vec::new(),
                slots: Vec::new(),
                cursor: 0,
                pending: 0,
                ticking: false,
            }),
            origin: Instant::now(),
            runtime,
        })
    }

    /// The first tick at or after `now + timeout`.
    fn deadline_tick(&self, timeout: Duration) -> u64 {
        let due = Instant::now().saturating_duration_since(self.origin) + timeout;
        let granularity = GRANULARITY.as_nanos();
        u64::try_from(due.as_nanos().div_ceil(granularity)).unwrap_or(u64::MAX)
    }

    /// The latest tick whose time has come.
    fn current_tick(&self) -> u64 {
        let since = Instant::now().saturating_duration_since(self.origin);
        u64::try_from(since.as_nanos() / GRANULARITY.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Register an ask that gives up after `timeout`; `waker` is woken when it expires. The
    /// flag says whether the deadline has already passed (then nothing will wake it).
    pub(crate) fn insert(
        self: &Arc<Self>,
        timeout: Duration,
        waker: &Waker,
    ) -> (DeadlineKey, bool) {
        let deadline = self.deadline_tick(timeout);
        let mut wheel = self.wheel.lock();
        if wheel.slots.is_empty() {
            wheel.slots = vec![Vec::new(); SLOTS];
        }
        let index = match wheel.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(wheel.entries.len()).expect("fewer than 2^32 asks");
                wheel.entries.push(Entry::default());
                index
            }
        };
        let key = DeadlineKey(index);
        if deadline <= wheel.cursor {
            // The deadline's tick was already processed: it has passed.
            wheel.entries[index as usize].state = EntryState::Expired;
            return (key, true);
        }
        let slot = slot_of(deadline);
        let at = u32::try_from(wheel.slots[slot].len()).expect("fewer than 2^32 asks");
        wheel.slots[slot].push(index);
        wheel.entries[index as usize] = Entry {
            deadline,
            at,
            waker: Some(waker.clone()),
            state: EntryState::Waiting,
        };
        wheel.pending += 1;
        if !wheel.ticking {
            wheel.ticking = true;
            drop(wheel);
            self.runtime.spawn(Arc::clone(self).tick());
        }
        (key, false)
    }

    /// Whether the ask's deadline has passed; if not, make sure `waker` is the one woken then.
    pub(crate) fn poll_expired(&self, key: &DeadlineKey, waker: &Waker) -> bool {
        let mut wheel = self.wheel.lock();
        let entry = &mut wheel.entries[key.0 as usize];
        match entry.state {
            EntryState::Expired => true,
            EntryState::Waiting => {
                if !entry.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    entry.waker = Some(waker.clone());
                }
                false
            }
            EntryState::Free => unreachable!("an ask's deadline entry is freed only by the ask"),
        }
    }

    /// The ask ended: free its entry.
    pub(crate) fn remove(&self, key: DeadlineKey) {
        let mut wheel = self.wheel.lock();
        let wheel = &mut *wheel;
        let index = key.0;
        let entry = std::mem::take(&mut wheel.entries[index as usize]);
        if entry.state == EntryState::Waiting {
            let slot = &mut wheel.slots[slot_of(entry.deadline)];
            let at = entry.at as usize;
            debug_assert_eq!(slot[at], index);
            slot.swap_remove(at);
            if let Some(&moved) = slot.get(at) {
                wheel.entries[moved as usize].at = entry.at;
            }
            wheel.pending -= 1;
        }
        wheel.free.push(index);
    }

    /// Asks waiting with a deadline armed.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.wheel.lock().pending
    }

    /// Entries held, free ones included (0 once the ticker has stopped and given them back).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        let wheel = self.wheel.lock();
        wheel.entries.len() + wheel.slots.len()
    }

    /// The ticker: once per tick while asks are pending, expire the due ones.
    async fn tick(self: Arc<Self>) {
        // If the runtime drops this task, a later ask starts a new ticker.
        let mut guard = TickerGuard {
            deadlines: &self,
            armed: true,
        };
        let mut idle = 0;
        loop {
            let next = self.wheel.lock().cursor + 1;
            let at = self.origin + tick_duration(next);
            tokio::time::sleep_until(at).await;
            let now = self.current_tick().max(next);
            let due = {
                let mut wheel = self.wheel.lock();
                let due = wheel.expire_through(now);
                if wheel.pending == 0 {
                    idle += 1;
                    if idle >= IDLE_TICKS {
                        if wheel.entries.len() == wheel.free.len() {
                            // No entry is owned by an ask: give the memory back.
                            wheel.entries = Vec::new();
                            wheel.free = Vec::new();
                            wheel.slots = Vec::new();
                        }
                        // Decided under the lock, so the next insert starts a new ticker.
                        wheel.ticking = false;
                        guard.armed = false;
                        return;
                    }
                } else {
                    idle = 0;
                }
                due
            };
            for waker in due {
                waker.wake();
            }
        }
    }
}

/// Clears `ticking` if the ticker task ends other than by going idle (a runtime shutting down).
struct TickerGuard<'a> {
    deadlines: &'a AskDeadlines,
    armed: bool,
}

impl Drop for TickerGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.deadlines.wheel.lock().ticking = false;
        }
    }
}

impl Wheel {
    /// Mark every entry due by tick `now` expired and return their wakers.
    fn expire_through(&mut self, now: u64) -> Vec<Waker> {
        let mut due = Vec::new();
        if self.slots.is_empty() || now <= self.cursor {
            self.cursor = self.cursor.max(now);
            return due;
        }
        // Beyond one full turn every slot is visited once.
        let ticks = (now - self.cursor).min(SLOTS as u64);
        for tick in (now + 1 - ticks)..=now {
            let slot = slot_of(tick);
            let mut i = 0;
            while i < self.slots[slot].len() {
                let index = self.slots[slot][i] as usize;
                if self.entries[index].deadline <= now {
                    self.slots[slot].swap_remove(i);
                    if let Some(&moved) = self.slots[slot].get(i) {
                        // Slot positions were u32 when pushed, and this one is below those.
                        self.entries[moved as usize].at = u32::try_from(i).unwrap_or(u32::MAX);
                    }
                    let entry = &mut self.entries[index];
                    entry.state = EntryState::Expired;
                    due.extend(entry.waker.take());
                    self.pending -= 1;
                } else {
                    i += 1;
                }
            }
        }
        self.cursor = now;
        due
    }
}

fn slot_of(tick: u64) -> usize {
    (tick % SLOTS as u64) as usize
}

fn tick_duration(ticks: u64) -> Duration {
    GRANULARITY.saturating_mul(u32::try_from(ticks).unwrap_or(u32::MAX))
}
