//! The renewals of sync bodies: one thread per process serves every running sync call's
//! heartbeat (contract L1).
//!
//! A sync body blocks its thread, so its lease must be renewed from elsewhere. Starting a
//! task per call would wake another thread twice per call (start, stop), even for the
//! common body that ends long before its first renewal. Instead each thread that runs sync
//! calls owns one slot, registered with the service once: a call puts its heartbeat in its
//! thread's slot when its claim is made and takes it out when the call ends (an uncontended
//! lock each, no allocation, no wake-up). The service thread looks at the slots every tick
//! — at most 50 ms, less for a lease with little slack — and starts each renewal that is
//! due by its heartbeat's own clock (tests move a manual clock) on idem's background
//! runtime. A renewal is therefore at most one tick late, well inside the slack between
//! heartbeat and lease; the service sleeps without ticking while no slot holds a call.

use std::cell::OnceCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use super::Heartbeat;

/// The longest pause between two looks at the slots.
const TICK_MAX: Duration = Duration::from_millis(50);

/// The sync calls running on one thread (more than one when a sync body calls another sync
/// tool), innermost last.
#[derive(Debug, Default)]
struct Slot {
    calls: Mutex<Vec<Running>>,
}

/// One sync call's heartbeat in its thread's slot.
#[derive(Debug)]
struct Running {
    id: u64,
    heartbeat: Heartbeat,
    /// How often the service must look for this heartbeat to be at most a quarter of its
    /// slack (lease − heartbeat) late.
    tick: Duration,
    /// A renewal is in flight.
    renewing: bool,
    /// A renewal found the claim lost: no more renewals.
    lost: bool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Vec<Running>> {
        // Every mutation is a push, a removal or a flag: a panic elsewhere cannot leave the
        // list half-written.
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the flags of call `id` (if it still runs).
    fn settle(&self, id: u64, lost: bool) {
        if let Some(running) = self.lock().iter_mut().find(|r| r.id == id) {
            running.renewing = false;
            running.lost |= lost;
        }
    }
}

/// Keeps a sync call's heartbeat in its thread's slot; takes it out on drop.
#[derive(Debug)]
pub(crate) struct Beating {
    slot: Arc<Slot>,
    id: u64,
}

impl Drop for Beating {
    fn drop(&mut self) {
        self.slot.lock().retain(|running| running.id != self.id);
    }
}

/// The service: every thread's slot, and the condition its thread waits on.
#[derive(Default)]
struct Service {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    slots: Vec<Weak<Slot>>,
    /// The tick the service sleeps for now; `None` while no slot holds a call.
    tick: Option<Duration>,
}

impl Service {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn serve(&self) {
        let mut state = self.lock();
        loop {
            // Slots of threads that exited are gone.
            state.slots.retain(|slot| slot.strong_count() > 0);
            let mut tick: Option<Duration> = None;
            for slot in state.slots.iter().filter_map(Weak::upgrade) {
                for running in slot.lock().iter_mut() {
                    tick = Some(tick.map_or(running.tick, |t| t.min(running.tick)));
                    let heartbeat = &running.heartbeat;
                    if running.renewing || running.lost || heartbeat.clock.now() < heartbeat.due() {
                        continue;
                    }
                    running.renewing = true;
                    let (heartbeat, slot, id) = (heartbeat.clone(), Arc::clone(&slot), running.id);
                    let span = heartbeat.trace.span().clone();
                    renew(tracing::Instrument::instrument(
                        async move {
                            let alive = heartbeat.renew_once().await;
                            slot.settle(id, !alive);
                        },
                        span,
                    ));
                }
            }
            state.tick = tick;
            state = match tick {
                Some(tick) => {
                    self.wake
                        .wait_timeout(state, tick)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// Runs one renewal on idem's background runtime (or here, if it could not start).
fn renew(renewal: impl std::future::Future<Output = ()> + Send + 'static) {
    match crate::detach::background() {
        Some(runtime) => drop(runtime.spawn(renewal)),
        None => pollster::block_on(renewal),
    }
}

/// The process's renewal service, started on first use; `None` if its thread could not be
/// started (logged once).
fn service() -> Option<&'static Arc<Service>> {
    static SERVICE: OnceLock<Option<Arc<Service>>> = OnceLock::new();
    SERVICE
        .get_or_init(|| {
            let service = Arc::new(Service::default());
            let serving = Arc::clone(&service);
            std::thread::Builder::new()
                .name("idem-heartbeats".into())
                .spawn(move || serving.serve())
                .map_err(|error| {
                    tracing::error!(%error, "idem could not start its renewal thread; sync bodies are not renewed");
                })
                .ok()
                .map(|_| service)
        })
        .as_ref()
}

thread_local! {
    /// This thread's slot, registered with the service on first use.
    static SLOT: OnceCell<Arc<Slot>> = const { OnceCell::new() };
}

impl Heartbeat {
    /// Puts this heartbeat in this thread's slot, for a sync body that blocks its thread:
    /// the service renews it on schedule until the returned guard drops.
    pub(crate) fn register(&self) -> Option<Beating> {
        let Some(service) = service() else {
            tracing::warn!(tool = self.tool, key = %self.key, "no renewal thread; the body runs without renewals");
            return None;
        };
        let slack = self.lease.saturating_sub(self.every);
        let tick = (slack / 4).clamp(Duration::from_millis(1), TICK_MAX);
        let slot = SLOT.with(|slot| {
            Arc::clone(slot.get_or_init(|| {
                let slot = Arc::new(Slot::default());
                service.lock().slots.push(Arc::downgrade(&slot));
                slot
            }))
        });
        let id = next_id();
        slot.lock().push(Running {
            id,
            heartbeat: self.clone(),
            tick,
            renewing: false,
            lost: false,
        });
        // Wake the service only if it sleeps without ticking or ticks too slowly for this
        // call; a ticking service finds the call at its next look. (The call is in its slot
        // before the tick is read, and the service scans and sets the tick under its lock,
        // so a scan that missed the call is followed by this wake.)
        let current = service.lock().tick;
        if current.is_none_or(|current| current > tick) {
            service.wake.notify_one();
        }
        Some(Beating { slot, id })
    }
}

/// A process-wide unique id for a running sync call.
fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
