//! A circuit breaker per provider: after `failures` calls in a row fail by the provider's fault
//! the circuit opens and calls fail at once (so a fallback walk moves to the next model without
//! waiting on a vendor that is down); after `cooldown` one probe call goes through, and its
//! outcome closes or reopens the circuit. The state is per process (per router replica), and
//! with a [`CircuitSync`] shared with the other replicas through Redis (`circuit_sync`).

use std::{
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Gauge},
};

use crate::{
    ChatRequest, Completion, ErrorKind, EventStream, Provider, ProviderError,
    circuit_sync::{Change, CircuitSync, Claim, RECORD_TTL, Record, millis, wall_ms},
};

/// When a provider's circuit opens and how long it stays open before a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitSettings {
    /// Failures in a row that open the circuit; 0 turns the breaker off.
    pub failures: u32,
    /// Time open before one probe call is let through.
    pub cooldown: Duration,
}

impl CircuitSettings {
    pub const DISABLED: Self = Self { failures: 0, cooldown: Duration::ZERO };
}

/// The circuit's state, with the values the `switchyard.provider.circuit_state` gauge takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    Closed = 0,
    HalfOpen = 1,
    Open = 2,
}

impl CircuitState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::HalfOpen => "half_open",
            Self::Open => "open",
        }
    }
}

/// What a call's outcome says about the provider's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// It answered (an answer, or a refusal of this request: the vendor is up).
    Answered,
    /// It failed by its own fault.
    Failed,
    /// Nothing learnt: no call reached the vendor.
    Unknown,
}

impl Health {
    /// Server errors, timeouts, broken connections, 429 still answered after the provider's
    /// own retries and answers not in the vendor's format are the provider's fault. A refused
    /// request (other 4xx) and a refused key (401/403) are answers: the vendor is reachable,
    /// and a bad key or a malformed request does not heal with a cooldown, so opening would
    /// only hide the real cause behind "circuit open". Requests refused before any call
    /// (unsupported content, no such provider) say nothing.
    pub fn of(outcome: Result<(), ErrorKind>) -> Self {
        match outcome {
            Ok(()) => Self::Answered,
            Err(ErrorKind::Connect | ErrorKind::Timeout | ErrorKind::RateLimited | ErrorKind::Server) => Self::Failed,
            Err(ErrorKind::Protocol) => Self::Failed,
            Err(ErrorKind::Auth | ErrorKind::Rejected) => Self::Answered,
            Err(ErrorKind::Unsupported | ErrorKind::NotConfigured | ErrorKind::CircuitOpen | ErrorKind::Cooling) => {
                Self::Unknown
            }
        }
    }
}

/// Whether a call may go to the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The circuit is closed.
    Call,
    /// The one probe of a half-open circuit: its outcome must be recorded with `probe = true`.
    Probe,
    /// Open (or half-open with its probe in flight): fail at once; a probe is due at `until`.
    Refuse { until: Instant },
}

/// A circuit's state as another replica published it, in this replica's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// Opened (or reopened by a failed probe) until then.
    Open { until: Instant },
    /// Closed by a probe that answered.
    Closed,
}

/// The state machine, without clock or I/O: every step is given `now`.
#[derive(Debug)]
pub struct Circuit {
    settings: CircuitSettings,
    state: Inner,
}

#[derive(Debug, Clone, Copy)]
enum Inner {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { since: Instant },
}

impl Circuit {
    pub fn new(settings: CircuitSettings) -> Self {
        Self { settings, state: Inner::Closed { failures: 0 } }
    }

    pub fn state(&self) -> CircuitState {
        match self.state {
            Inner::Closed { .. } => CircuitState::Closed,
            Inner::Open { .. } => CircuitState::Open,
            Inner::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Whether a call may start now; an open circuit past its cooldown turns half-open and
    /// admits this call as its probe. Returns the transition it made, if any.
    pub fn admit(&mut self, now: Instant) -> (Admission, Option<CircuitState>) {
        match self.state {
            _ if self.settings.failures == 0 => (Admission::Call, None),
            Inner::Closed { .. } => (Admission::Call, None),
            Inner::Open { until } if now >= until => {
                self.state = Inner::HalfOpen { since: now };
                (Admission::Probe, Some(CircuitState::HalfOpen))
            }
            Inner::Open { until } => (Admission::Refuse { until }, None),
            // The probe is in flight; if it never reports (its caller gave up) another one is
            // let through after a further cooldown, so the circuit cannot stay stuck.
            Inner::HalfOpen { since } if now >= since + self.settings.cooldown => {
                self.state = Inner::HalfOpen { since: now };
                (Admission::Probe, None)
            }
            Inner::HalfOpen { since } => (Admission::Refuse { until: since + self.settings.cooldown }, None),
        }
    }

    /// Whether the next [`admit`](Self::admit) would let a probe through: open past its
    /// cooldown, or half-open with a probe that never reported for a cooldown.
    pub fn probe_due(&self, now: Instant) -> bool {
        match self.state {
            _ if self.settings.failures == 0 => false,
            Inner::Closed { .. } => false,
            Inner::Open { until } => now >= until,
            Inner::HalfOpen { since } => now >= since + self.settings.cooldown,
        }
    }

    /// Another replica is probing (or has just decided): stay open, refusing calls, until
    /// `until`, when a probe may be due again. No transition: the circuit was open already or
    /// is left so.
    pub fn hold(&mut self, until: Instant) {
        if self.settings.failures > 0 && !matches!(self.state, Inner::Closed { .. }) {
            self.state = Inner::Open { until };
        }
    }

    /// Takes the state another replica published (newer than this one's own, which the
    /// caller checks): open until a time, or closed after a probe answered. Returns the
    /// transition it made, if any.
    pub fn adopt(&mut self, shared: Shared) -> Option<CircuitState> {
        if self.settings.failures == 0 {
            return None;
        }
        match (self.state, shared) {
            (Inner::Open { .. }, Shared::Open { until }) => {
                self.state = Inner::Open { until };
                None
            }
            (_, Shared::Open { until }) => {
                self.state = Inner::Open { until };
                Some(CircuitState::Open)
            }
            (Inner::Closed { .. }, Shared::Closed) => None,
            (_, Shared::Closed) => {
                self.state = Inner::Closed { failures: 0 };
                Some(CircuitState::Closed)
            }
        }
    }

    /// A call's outcome; `probe` when it was admitted as [`Admission::Probe`]. Returns the
    /// transition it made, if any.
    pub fn record(&mut self, health: Health, probe: bool, now: Instant) -> Option<CircuitState> {
        if self.settings.failures == 0 {
            return None;
        }
        match (self.state, health) {
            (_, Health::Unknown) => {
                if probe && matches!(self.state, Inner::HalfOpen { .. }) {
                    // Nothing reached the vendor: the next call probes instead.
                    self.state = Inner::Open { until: now };
                    return Some(CircuitState::Open);
                }
                None
            }
            (Inner::HalfOpen { .. }, Health::Answered) if probe => {
                self.state = Inner::Closed { failures: 0 };
                Some(CircuitState::Closed)
            }
            (Inner::HalfOpen { .. }, Health::Failed) if probe => {
                self.state = Inner::Open { until: now + self.settings.cooldown };
                Some(CircuitState::Open)
            }
            (Inner::Closed { .. }, Health::Answered) => {
                self.state = Inner::Closed { failures: 0 };
                None
            }
            (Inner::Closed { failures }, Health::Failed) => {
                let failures = failures + 1;
                if failures >= self.settings.failures {
                    self.state = Inner::Open { until: now + self.settings.cooldown };
                    Some(CircuitState::Open)
                } else {
                    self.state = Inner::Closed { failures };
                    None
                }
            }
            // A call admitted before the circuit opened, finishing late: the circuit already
            // decided on fresher evidence.
            _ => None,
        }
    }
}

struct Instruments {
    state: Gauge<u64>,
    transitions: Counter<u64>,
}

fn instruments() -> &'static Instruments {
    // Made at the first use, after the service's telemetry setup installed the meter provider.
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("switchyard-llm");
        Instruments {
            state: meter
                .u64_gauge("switchyard.provider.circuit_state")
                .with_description("Each provider's circuit in this replica: 0 closed, 1 half-open, 2 open")
                .build(),
            transitions: meter
                .u64_counter("switchyard.provider.circuit_transitions")
                .with_description("Circuit state changes, by provider and the state entered (open, half_open, closed)")
                .build(),
        }
    })
}

/// A provider behind its circuit, kept in this replica and, with a [`CircuitSync`], shared with
/// the other replicas (see `circuit_sync`).
pub struct CircuitBreaker {
    inner: Arc<dyn Provider>,
    local: Mutex<Local>,
    sync: Option<Arc<CircuitSync>>,
    /// A probe lease is being claimed: the replica's other calls are refused meanwhile rather
    /// than claiming it too.
    claiming: AtomicBool,
}

/// This replica's circuit and when its state last changed (wall-clock ms), to tell whether a
/// shared record is newer.
struct Local {
    circuit: Circuit,
    changed_ms: u64,
    /// This replica's own last change, while no newer change came from another replica.
    own_change: Option<Record>,
}

impl CircuitBreaker {
    pub fn new(inner: Arc<dyn Provider>, settings: CircuitSettings) -> Self {
        let breaker = Self {
            inner,
            local: Mutex::new(Local { circuit: Circuit::new(settings), changed_ms: 0, own_change: None }),
            sync: None,
            claiming: AtomicBool::new(false),
        };
        breaker.report(CircuitState::Closed, false);
        breaker
    }

    /// A breaker sharing its state through `sync`: it reads the shared record every
    /// `sync.interval()` in a task that ends with the breaker. Needs a Tokio runtime.
    pub fn shared(inner: Arc<dyn Provider>, settings: CircuitSettings, sync: Arc<CircuitSync>) -> Arc<Self> {
        let breaker = Arc::new(Self { sync: Some(sync.clone()), ..Self::new(inner, settings) });
        let watched = Arc::downgrade(&breaker);
        let provider = breaker.inner.name().to_owned();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(sync.interval());
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if watched.strong_count() == 0 {
                    return;
                }
                let Ok(record) = sync.read(&provider).await else { continue };
                let Some(breaker) = watched.upgrade() else { return };
                match record {
                    Some(record) if breaker.is_newer(&record) => breaker.take_shared(record),
                    // Redis holds an older state than this replica's own last change (its
                    // write failed while Redis was away): written now.
                    _ => {
                        if let Some(own) = breaker.unpublished(record) {
                            sync.publish(&provider, own).await;
                        }
                    }
                }
            }
        });
        breaker
    }

    pub fn state(&self) -> CircuitState {
        self.lock().circuit.state()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Local> {
        // The circuit's steps cannot panic half-way, so a poisoned lock still holds a valid state.
        self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn report(&self, state: CircuitState, transition: bool) {
        self.report_from(state, transition, false);
    }

    fn report_from(&self, state: CircuitState, transition: bool, shared: bool) {
        let provider = KeyValue::new("provider", self.inner.name().to_owned());
        instruments().state.record(state as u64, std::slice::from_ref(&provider));
        if transition {
            tracing::warn!(provider = %self.inner.name(), to = state.as_str(), shared, "provider circuit changed");
            instruments().transitions.add(1, &[provider, KeyValue::new("to", state.as_str())]);
        }
    }

    fn is_newer(&self, record: &Record) -> bool {
        record.at_ms > self.lock().changed_ms
    }

    /// This replica's last change when Redis holds an older one (or none).
    fn unpublished(&self, stored: Option<Record>) -> Option<Record> {
        let own = self.lock().own_change?;
        stored.is_none_or(|stored| stored.at_ms < own.at_ms).then_some(own)
    }

    /// Takes a record another replica published when it is newer than this replica's state.
    fn take_shared(&self, record: Record) {
        let now = Instant::now();
        let transition = {
            let mut local = self.lock();
            if record.at_ms <= local.changed_ms {
                return;
            }
            local.changed_ms = record.at_ms;
            local.own_change = None;
            let shared = match record.change {
                Change::Open { until_ms } => {
                    // A record is data from outside: a far time is taken as the longest opening
                    // a record can stand for (it expires then), not an overflow.
                    let wait = Duration::from_millis(until_ms.saturating_sub(wall_ms())).min(RECORD_TTL);
                    Shared::Open { until: now + wait }
                }
                Change::Closed => Shared::Closed,
            };
            local.circuit.adopt(shared)
        };
        if let Some(state) = transition {
            self.report_from(state, true, true);
        }
    }

    /// With shared state, a due probe is first claimed: only the replica that wins the lease
    /// probes; the others keep refusing until the record tells them the outcome.
    async fn claim_if_due(&self, sync: &CircuitSync) -> Result<(), Instant> {
        let now = Instant::now();
        if !self.lock().circuit.probe_due(now) {
            return Ok(());
        }
        // Another call of this replica is claiming: its answer decides for both.
        let hold_until = now + sync.interval().min(self.cooldown());
        if self.claiming.swap(true, Ordering::AcqRel) {
            return Err(hold_until);
        }
        let claim = sync.claim_probe(self.inner.name(), self.cooldown()).await;
        self.claiming.store(false, Ordering::Release);
        match claim {
            // Won, or Redis away: the local circuit decides, as without sharing.
            Claim::Won | Claim::Unavailable => Ok(()),
            Claim::Lost(record) => {
                if let Some(record) = record {
                    self.take_shared(record);
                }
                let mut local = self.lock();
                if local.circuit.probe_due(Instant::now()) {
                    local.circuit.hold(hold_until);
                }
                Ok(())
            }
        }
    }

    fn cooldown(&self) -> Duration {
        self.lock().circuit.settings.cooldown
    }

    async fn admit(&self) -> Result<bool, ProviderError> {
        if let Some(sync) = &self.sync
            && let Err(until) = self.claim_if_due(sync).await
        {
            return Err(self.refusal(until, Instant::now()));
        }
        let now = Instant::now();
        let (admission, transition) = self.lock().circuit.admit(now);
        if let Some(state) = transition {
            self.report(state, true);
        }
        match admission {
            Admission::Call => Ok(false),
            Admission::Probe => Ok(true),
            Admission::Refuse { until } => Err(self.refusal(until, now)),
        }
    }

    fn refusal(&self, until: Instant, now: Instant) -> ProviderError {
        ProviderError::new(
            self.inner.name(),
            ErrorKind::CircuitOpen,
            format!(
                "the circuit is open after repeated failures; the provider will be probed again in {}s",
                until.saturating_duration_since(now).as_secs_f64().ceil()
            ),
        )
    }

    fn record<T>(&self, outcome: &Result<T, ProviderError>, probe: bool) {
        let health = Health::of(outcome.as_ref().map(|_| ()).map_err(|error| error.kind));
        let (transition, published) = {
            let mut local = self.lock();
            let transition = local.circuit.record(health, probe, Instant::now());
            let published = transition.and_then(|state| {
                // Stamped after the last change this replica knows of, so it replaces it.
                let at_ms = wall_ms().max(local.changed_ms + 1);
                local.changed_ms = at_ms;
                let change = match state {
                    CircuitState::Open => {
                        Change::Open { until_ms: at_ms.saturating_add(millis(local.circuit.settings.cooldown)) }
                    }
                    CircuitState::Closed => Change::Closed,
                    // Half-open is the lease's business, not the record's.
                    CircuitState::HalfOpen => return None,
                };
                let record = Record { at_ms, change };
                local.own_change = Some(record);
                Some(record)
            });
            (transition, published)
        };
        if let Some(state) = transition {
            self.report(state, true);
        }
        if let (Some(sync), Some(record)) = (&self.sync, published) {
            // Written in the background: the call's answer does not wait on Redis.
            let sync = sync.clone();
            let provider = self.inner.name().to_owned();
            tokio::spawn(async move { sync.publish(&provider, record).await });
        }
    }
}

#[async_trait::async_trait]
impl Provider for CircuitBreaker {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, request: ChatRequest) -> Result<Completion, ProviderError> {
        let probe = self.admit().await?;
        let outcome = self.inner.complete(request).await;
        self.record(&outcome, probe);
        outcome
    }

    /// Opening the stream is what counts: once it has started, its errors are the caller's.
    async fn stream(&self, request: ChatRequest) -> Result<EventStream, ProviderError> {
        let probe = self.admit().await?;
        let outcome = self.inner.stream(request).await;
        self.record(&outcome, probe);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOLDOWN: Duration = Duration::from_secs(30);

    fn circuit(failures: u32) -> Circuit {
        Circuit::new(CircuitSettings { failures, cooldown: COOLDOWN })
    }

    #[test]
    fn it_opens_after_the_failures_in_a_row_and_an_answer_resets_the_count() {
        let t0 = Instant::now();
        let mut circuit = circuit(3);
        for _ in 0..2 {
            assert_eq!(circuit.admit(t0).0, Admission::Call);
            assert_eq!(circuit.record(Health::Failed, false, t0), None);
        }
        assert_eq!(circuit.record(Health::Answered, false, t0), None);
        assert_eq!(circuit.record(Health::Failed, false, t0), None);
        assert_eq!(circuit.record(Health::Failed, false, t0), None);
        assert_eq!(circuit.state(), CircuitState::Closed);
        assert_eq!(circuit.record(Health::Failed, false, t0), Some(CircuitState::Open));
        assert_eq!(circuit.admit(t0 + Duration::from_secs(29)).0, Admission::Refuse { until: t0 + COOLDOWN });
    }

    #[test]
    fn after_the_cooldown_one_probe_goes_through_and_its_answer_closes_the_circuit() {
        let t0 = Instant::now();
        let mut circuit = circuit(1);
        assert_eq!(circuit.record(Health::Failed, false, t0), Some(CircuitState::Open));
        let later = t0 + COOLDOWN;
        assert_eq!(circuit.admit(later), (Admission::Probe, Some(CircuitState::HalfOpen)));
        // Others fail fast while the probe is out.
        assert!(matches!(circuit.admit(later).0, Admission::Refuse { .. }));
        assert_eq!(circuit.state(), CircuitState::HalfOpen);
        assert_eq!(circuit.record(Health::Answered, true, later), Some(CircuitState::Closed));
        assert_eq!(circuit.admit(later).0, Admission::Call);
    }

    #[test]
    fn a_failed_probe_reopens_for_another_cooldown() {
        let t0 = Instant::now();
        let mut circuit = circuit(1);
        circuit.record(Health::Failed, false, t0);
        let probe_at = t0 + COOLDOWN;
        assert_eq!(circuit.admit(probe_at).0, Admission::Probe);
        assert_eq!(circuit.record(Health::Failed, true, probe_at), Some(CircuitState::Open));
        assert_eq!(
            circuit.admit(probe_at + Duration::from_secs(1)).0,
            Admission::Refuse { until: probe_at + COOLDOWN }
        );
        assert_eq!(circuit.admit(probe_at + COOLDOWN).0, Admission::Probe);
    }

    #[test]
    fn a_probe_that_reached_no_vendor_or_never_reported_lets_another_through() {
        let t0 = Instant::now();
        let mut circuit = circuit(1);
        circuit.record(Health::Failed, false, t0);
        assert_eq!(circuit.admit(t0 + COOLDOWN).0, Admission::Probe);
        assert_eq!(circuit.record(Health::Unknown, true, t0 + COOLDOWN), Some(CircuitState::Open));
        assert_eq!(circuit.admit(t0 + COOLDOWN).0, Admission::Probe);
        // This probe's caller gave up without a word: after another cooldown, a new probe.
        assert!(matches!(circuit.admit(t0 + COOLDOWN * 2 - Duration::from_secs(1)).0, Admission::Refuse { .. }));
        assert_eq!(circuit.admit(t0 + COOLDOWN * 2), (Admission::Probe, None));
    }

    #[test]
    fn late_answers_from_before_the_opening_do_not_close_it_and_zero_failures_disables_it() {
        let t0 = Instant::now();
        let mut circuit = circuit(1);
        circuit.record(Health::Failed, false, t0);
        assert_eq!(circuit.record(Health::Answered, false, t0), None);
        assert_eq!(circuit.state(), CircuitState::Open);

        let mut off = Circuit::new(CircuitSettings::DISABLED);
        for _ in 0..100 {
            assert_eq!(off.record(Health::Failed, false, t0), None);
        }
        assert_eq!(off.admit(t0).0, Admission::Call);
    }

    #[test]
    fn another_replicas_state_is_taken_and_a_held_circuit_waits_for_its_probe() {
        let t0 = Instant::now();
        let mut circuit = circuit(3);
        assert_eq!(circuit.adopt(Shared::Open { until: t0 + COOLDOWN }), Some(CircuitState::Open));
        assert_eq!(circuit.admit(t0).0, Admission::Refuse { until: t0 + COOLDOWN });
        assert!(!circuit.probe_due(t0) && circuit.probe_due(t0 + COOLDOWN));
        // Another replica holds the probe: this one stays open, without a transition.
        circuit.hold(t0 + COOLDOWN + Duration::from_secs(1));
        assert!(!circuit.probe_due(t0 + COOLDOWN));
        assert_eq!(circuit.state(), CircuitState::Open);
        // Its probe answered: closed here too, and closed stays closed.
        assert_eq!(circuit.adopt(Shared::Closed), Some(CircuitState::Closed));
        assert_eq!(circuit.adopt(Shared::Closed), None);
        circuit.hold(t0 + COOLDOWN * 3);
        assert_eq!(circuit.admit(t0).0, Admission::Call, "holding never opens a closed circuit");
        let mut off = Circuit::new(CircuitSettings::DISABLED);
        assert_eq!(off.adopt(Shared::Open { until: t0 + COOLDOWN }), None);
        assert_eq!(off.admit(t0).0, Admission::Call);
    }

    #[test]
    fn only_the_providers_own_faults_count() {
        assert_eq!(Health::of(Err(ErrorKind::Server)), Health::Failed);
        assert_eq!(Health::of(Err(ErrorKind::RateLimited)), Health::Failed);
        assert_eq!(Health::of(Err(ErrorKind::Timeout)), Health::Failed);
        assert_eq!(Health::of(Err(ErrorKind::Connect)), Health::Failed);
        assert_eq!(Health::of(Err(ErrorKind::Rejected)), Health::Answered);
        assert_eq!(Health::of(Err(ErrorKind::Auth)), Health::Answered);
        assert_eq!(Health::of(Err(ErrorKind::Unsupported)), Health::Unknown);
        assert_eq!(Health::of(Err(ErrorKind::Cooling)), Health::Unknown);
    }
}
