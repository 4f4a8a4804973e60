//! Several deployments of one provider: the same API reached with several keys and/or at several
//! base URLs (accounts, regions, replicas of a local server), served as one provider. Calls go
//! round-robin over the deployments that are not cooling down; a deployment whose call fails by
//! its fault (429, 5xx, timeout, broken connection, garbled answer) cools down — it is skipped
//! for the `Retry-After` it was given or, without one, for a cooldown that doubles with each
//! failure in a row — and the call moves to the next deployment. When every deployment is
//! cooling, the call fails at once ([`ErrorKind::Cooling`]) and the fallback walk moves to the
//! next model.
//!
//! The deployments' own providers are built without retries: trying another deployment is the
//! retry, and waiting out one deployment's `Retry-After` while another is free would only delay
//! the answer. A call makes at most `attempts` calls in all, each to a different deployment.

use std::{
    future::Future,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Gauge},
};

use crate::{
    ChatRequest, Completion, ErrorKind, EventStream, Provider, ProviderError, circuit::Health, telemetry::error_type,
};

/// A `Retry-After` longer than this cools a deployment for this long only: the vendor is asked
/// again then (and may say to wait again), rather than a deployment lost for a day.
pub const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(15 * 60);

/// How deployments cool down and how many a call may try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeploymentSettings {
    /// The cooldown after a first failure without `Retry-After`; it doubles with each failure
    /// in a row up to `max_cooldown`.
    pub cooldown: Duration,
    pub max_cooldown: Duration,
    /// Calls one request may make, each to another deployment (the provider's retries + 1).
    pub attempts: u32,
}

impl DeploymentSettings {
    /// Doubling up to 16 times `cooldown`.
    pub fn new(cooldown: Duration, max_retries: u32) -> Self {
        Self { cooldown, max_cooldown: cooldown.saturating_mul(16), attempts: max_retries.saturating_add(1) }
    }
}

/// One deployment's health: cooling until a time, after `strikes` failures in a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cooling {
    until: Option<Instant>,
    strikes: u32,
}

impl Cooling {
    pub fn is_cooling(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// A failure at `now`, with the `Retry-After` it carried: cools the deployment and returns
    /// until when. A failure while already cooling (a call that started before) extends the
    /// cooldown to its `Retry-After` but adds no strike: it is the same bad spell.
    pub fn failed(&mut self, retry_after: Option<Duration>, settings: &DeploymentSettings, now: Instant) -> Instant {
        let asked = retry_after.map(|wait| wait.min(LONGEST_RETRY_AFTER)).unwrap_or_default();
        let until = if self.is_cooling(now) {
            // `asked` is at most LONGEST_RETRY_AFTER: no overflow.
            self.until.map_or(now + asked, |until| until.max(now + asked))
        } else {
            self.strikes = self.strikes.saturating_add(1);
            let doublings = self.strikes.saturating_sub(1).min(16);
            let grown = settings.cooldown.saturating_mul(1 << doublings).min(settings.max_cooldown);
            // A cooldown configured beyond the clock's range is as good as forever.
            now.checked_add(grown.max(asked)).unwrap_or(now + LONGEST_RETRY_AFTER)
        };
        self.until = Some(until);
        until
    }

    /// An answer: healthy again, the next failure starts from the first cooldown.
    pub fn answered(&mut self) {
        *self = Self::default();
    }
}

struct Instruments {
    healthy: Gauge<u64>,
    cooldowns: Counter<u64>,
    calls: Counter<u64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("switchyard-llm");
        Instruments {
            healthy: meter
                .u64_gauge("switchyard.provider.deployment_healthy")
                .with_description(
                    "Each deployment of a provider in this replica: 1 healthy, 0 from a failure until it answers again",
                )
                .build(),
            cooldowns: meter
                .u64_counter("switchyard.provider.deployment_cooldowns")
                .with_description("Deployments put to cool down, by provider, deployment and the failure's error type")
                .build(),
            calls: meter
                .u64_counter("switchyard.provider.deployment_calls")
                .with_description("Calls made to each deployment of a provider, by outcome (ok or the error type)")
                .build(),
        }
    })
}

struct Member {
    provider: Arc<dyn Provider>,
    /// Its position in the configuration, its label in metrics and logs (never the key or URL).
    label: String,
    cooling: Mutex<Cooling>,
}

impl Member {
    fn cooling(&self) -> std::sync::MutexGuard<'_, Cooling> {
        // A `Cooling` step cannot panic half-way, so a poisoned lock still holds a valid state.
        self.cooling.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn labels(&self) -> [KeyValue; 2] {
        [KeyValue::new("provider", self.provider.name().to_owned()), KeyValue::new("deployment", self.label.clone())]
    }

    /// Its labels and one more.
    fn labels_and(&self, name: &'static str, value: &'static str) -> [KeyValue; 3] {
        let [provider, deployment] = self.labels();
        [provider, deployment, KeyValue::new(name, value)]
    }
}

/// A provider made of several deployments of one API, all under the provider's one name.
pub struct Deployments {
    name: String,
    members: Vec<Member>,
    next: AtomicUsize,
    settings: DeploymentSettings,
}

impl std::fmt::Debug for Deployments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployments").field("name", &self.name).field("deployments", &self.members.len()).finish()
    }
}

impl Deployments {
    /// `deployments` in configuration order, each labelled by its position; they must share
    /// one provider name (the first one's).
    pub fn new(deployments: Vec<Arc<dyn Provider>>, settings: DeploymentSettings) -> Result<Self, String> {
        let name = deployments.first().ok_or("a provider needs at least one deployment")?.name().to_owned();
        if let Some(other) = deployments.iter().find(|deployment| deployment.name() != name) {
            return Err(format!("deployments of `{name}` must share its name, not `{}`", other.name()));
        }
        let members: Vec<Member> = deployments
            .into_iter()
            .enumerate()
            .map(|(position, provider)| Member {
                provider,
                label: position.to_string(),
                cooling: Mutex::new(Cooling::default()),
            })
            .collect();
        for member in &members {
            instruments().healthy.record(1, &member.labels());
        }
        Ok(Self { name, members, next: AtomicUsize::new(0), settings })
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The next deployment in turn that is neither cooling nor `tried` by this call.
    fn pick(&self, tried: &[bool], now: Instant) -> Option<usize> {
        let count = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % count;
        (0..count)
            .map(|offset| (start + offset) % count)
            .find(|&position| !tried[position] && !self.members[position].cooling().is_cooling(now))
    }

    async fn call<T, F, Fut>(&self, call: F) -> Result<T, ProviderError>
    where
        F: Fn(Arc<dyn Provider>) -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let mut tried = vec![false; self.members.len()];
        let mut last_failure = None;
        for _ in 0..self.settings.attempts.max(1) {
            let Some(position) = self.pick(&tried, Instant::now()) else { break };
            tried[position] = true;
            let member = &self.members[position];
            let outcome = call(member.provider.clone()).await;
            let kind = outcome.as_ref().err().map(|error| error.kind);
            let outcome_label = kind.map_or("ok", error_type);
            instruments().calls.add(1, &member.labels_and("outcome", outcome_label));
            match (outcome, Health::of(kind.map_or(Ok(()), Err))) {
                (Ok(answer), _) => {
                    let was_failing = std::mem::take(&mut *member.cooling()) != Cooling::default();
                    if was_failing {
                        instruments().healthy.record(1, &member.labels());
                        tracing::info!(provider = %self.name, deployment = %member.label, "deployment answered again");
                    }
                    return Ok(answer);
                }
                (Err(error), Health::Failed) => {
                    let until = member.cooling().failed(error.retry_after, &self.settings, Instant::now());
                    instruments().healthy.record(0, &member.labels());
                    instruments().cooldowns.add(1, &member.labels_and("error_type", error_type(error.kind)));
                    tracing::warn!(
                        provider = %self.name,
                        deployment = %member.label,
                        cooldown = ?until.saturating_duration_since(Instant::now()),
                        cause = %error.message,
                        "deployment failed; cooling it down"
                    );
                    last_failure = Some(error);
                }
                // A refusal of the request (or a bad key) is the answer: another deployment of
                // the same API would refuse it too, and its health is not in question.
                (Err(error), _) => return Err(error),
            }
        }
        Err(last_failure.unwrap_or_else(|| self.all_cooling()))
    }

    fn all_cooling(&self) -> ProviderError {
        let now = Instant::now();
        let back = self
            .members
            .iter()
            .filter_map(|member| member.cooling().until)
            .map(|until| until.saturating_duration_since(now))
            .min()
            .unwrap_or_default();
        ProviderError::new(
            self.name.clone(),
            ErrorKind::Cooling,
            format!(
                "all {} deployments are cooling down after failures; the first is back in {}s",
                self.members.len(),
                back.as_secs_f64().ceil()
            ),
        )
    }
}

#[async_trait::async_trait]
impl Provider for Deployments {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(&self, request: ChatRequest) -> Result<Completion, ProviderError> {
        self.call(|provider| {
            let request = request.clone();
            async move { provider.complete(request).await }
        })
        .await
    }

    /// Another deployment is tried only while opening: once a stream has started, its errors
    /// are the caller's.
    async fn stream(&self, request: ChatRequest) -> Result<EventStream, ProviderError> {
        self.call(|provider| {
            let request = request.clone();
            async move { provider.stream(request).await }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: DeploymentSettings =
        DeploymentSettings { cooldown: Duration::from_secs(5), max_cooldown: Duration::from_secs(80), attempts: 3 };

    #[test]
    fn the_cooldown_doubles_with_failures_in_a_row_up_to_the_most() {
        let t0 = Instant::now();
        let mut cooling = Cooling::default();
        let mut at = t0;
        for expected in [5, 10, 20, 40, 80, 80] {
            let until = cooling.failed(None, &SETTINGS, at);
            assert_eq!(until - at, Duration::from_secs(expected));
            assert!(cooling.is_cooling(until - Duration::from_millis(1)) && !cooling.is_cooling(until));
            at = until;
        }
        cooling.answered();
        assert_eq!(cooling.failed(None, &SETTINGS, at) - at, Duration::from_secs(5));
    }

    #[test]
    fn retry_after_is_honoured_within_its_ceiling_and_late_failures_add_no_strike() {
        let t0 = Instant::now();
        let mut cooling = Cooling::default();
        assert_eq!(cooling.failed(Some(Duration::from_secs(30)), &SETTINGS, t0) - t0, Duration::from_secs(30));
        // A second failure of the same spell (a call that started before): extended, not grown.
        assert_eq!(cooling.failed(None, &SETTINGS, t0) - t0, Duration::from_secs(30));
        assert_eq!(cooling.failed(Some(Duration::from_secs(40)), &SETTINGS, t0) - t0, Duration::from_secs(40));
        let later = t0 + Duration::from_secs(40);
        assert_eq!(cooling.failed(None, &SETTINGS, later) - later, Duration::from_secs(10), "second strike");
        let mut cooling = Cooling::default();
        assert_eq!(cooling.failed(Some(Duration::from_secs(86_400)), &SETTINGS, t0) - t0, LONGEST_RETRY_AFTER);
        let mut cooling = Cooling::default();
        assert_eq!(cooling.failed(Some(Duration::from_millis(10)), &SETTINGS, t0) - t0, Duration::from_secs(5));
    }
}
