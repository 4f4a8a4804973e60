//! The provider trait and the registry that resolves `<provider>/<model>` names.

use std::{collections::HashMap, sync::Arc};

use futures::stream::BoxStream;

use crate::{ChatRequest, Completion, ModelRef, ProviderError, StreamEvent};

/// What a streaming call yields; the last item is `StreamEvent::Done` (or an error).
pub type EventStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// One LLM vendor's API. Implementations retry what is worth retrying (429, 5xx, connection
/// errors) before returning, honouring `Retry-After`; once a stream has started, an error ends it.
#[async_trait::async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Short name used in model names and errors (`openai`, `anthropic`).
    fn name(&self) -> &str;

    /// One non-streaming call (the vendor's JSON response).
    async fn complete(&self, request: ChatRequest) -> Result<Completion, ProviderError>;

    /// One streaming call (the vendor's Server-Sent Events).
    async fn stream(&self, request: ChatRequest) -> Result<EventStream, ProviderError>;
}

/// The configured providers by name.
#[derive(Clone, Default)]
pub struct Providers {
    by_name: HashMap<String, Arc<dyn Provider>>,
    /// Each provider is behind its circuit already: wrapping again would count every failure
    /// twice.
    circuits: bool,
}

impl Providers {
    pub fn insert(&mut self, provider: Arc<dyn Provider>) {
        self.by_name.insert(provider.name().to_owned(), provider);
    }

    pub fn get(&self, model: &ModelRef) -> Result<Arc<dyn Provider>, ProviderError> {
        self.by_name.get(&model.provider).cloned().ok_or_else(|| {
            ProviderError::new(
                model.provider.clone(),
                crate::ErrorKind::NotConfigured,
                format!("no provider `{}` is configured (model `{model}`)", model.provider),
            )
        })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Each provider behind its own [`CircuitBreaker`](crate::CircuitBreaker), kept in this
    /// process; unchanged when `settings.failures` is 0 or the providers have their circuits.
    pub fn with_circuits(self, settings: crate::CircuitSettings) -> Self {
        self.with_shared_circuits(settings, None)
    }

    /// As [`with_circuits`](Self::with_circuits), each circuit shared with the other replicas
    /// through `sync` when given (a Tokio runtime must be running: each breaker reads the
    /// shared state in a task of its own).
    pub fn with_shared_circuits(self, settings: crate::CircuitSettings, sync: Option<Arc<crate::CircuitSync>>) -> Self {
        if settings.failures == 0 || self.circuits {
            return self;
        }
        let by_name = self
            .by_name
            .into_iter()
            .map(|(name, provider)| {
                let breaker: Arc<dyn Provider> = match &sync {
                    Some(sync) => crate::CircuitBreaker::shared(provider, settings, sync.clone()),
                    None => Arc::new(crate::CircuitBreaker::new(provider, settings)),
                };
                (name, breaker)
            })
            .collect();
        Self { by_name, circuits: true }
    }

    /// Whether each provider is behind its circuit already.
    pub fn has_circuits(&self) -> bool {
        self.circuits
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}
