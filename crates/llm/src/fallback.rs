//! Walking an ordered list of models: the first whose provider answers wins; the others'
//! errors are kept so the caller can report (and count) what was skipped.

use std::{fmt, future::Future, sync::Arc};

use switchyard_kit::log::Throttle;

use crate::{ChatRequest, Completion, EventStream, ModelRef, Provider, ProviderError, Providers};

/// An answer from one of several models, with the failures of those tried before it.
pub struct Answered<T> {
    /// The model that answered.
    pub model: ModelRef,
    pub output: T,
    /// The models tried before it, in order, and why each failed.
    pub failed: Vec<ModelFailure>,
}

impl<T> fmt::Debug for Answered<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answered").field("model", &self.model).field("failed", &self.failed).finish_non_exhaustive()
    }
}

/// One model that could not answer.
#[derive(Debug, Clone)]
pub struct ModelFailure {
    pub model: ModelRef,
    pub error: ProviderError,
}

impl fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.model, self.error.message)
    }
}

/// Every model failed; `Display` lists each as `provider/model: cause`.
#[derive(Debug, Clone, thiserror::Error)]
pub struct AllModelsFailed {
    pub failures: Vec<ModelFailure>,
}

impl AllModelsFailed {
    /// The caller's mistake, when every model tried refused the request as one it cannot serve
    /// ([`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported): images for a text-only
    /// model, a malformed image URL…): the first refusal, naming the field. Models whose
    /// provider is not configured were not tried. `None` when any model failed otherwise (an
    /// outage is not the caller's to fix).
    pub fn refusal(&self) -> Option<&ProviderError> {
        let tried = || {
            self.failures
                .iter()
                .map(|failure| &failure.error)
                .filter(|error| error.kind != crate::ErrorKind::NotConfigured)
        };
        let all_refused = tried().all(|error| error.kind == crate::ErrorKind::Unsupported);
        if all_refused { tried().next() } else { None }
    }
}

impl fmt::Display for AllModelsFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.failures.is_empty() {
            return f.write_str("no model to try");
        }
        f.write_str("every model failed: ")?;
        for (position, failure) in self.failures.iter().enumerate() {
            if position > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{failure}")?;
        }
        Ok(())
    }
}

impl Providers {
    /// A non-streaming answer from the first of `models` that gives one, each asked with
    /// `request.model` set to its vendor name. A model whose provider is not configured or
    /// fails (after its own retries) is skipped.
    pub async fn complete_with_fallback(
        &self,
        models: &[ModelRef],
        request: ChatRequest,
    ) -> Result<Answered<Completion>, AllModelsFailed> {
        self.first_answer(models, request, |provider, request| async move { provider.complete(request).await }).await
    }

    /// A stream from the first of `models` whose provider opens one. Fallback happens only
    /// while opening: once a stream has started, its errors are the caller's (text may have
    /// been shown).
    pub async fn stream_with_fallback(
        &self,
        models: &[ModelRef],
        request: ChatRequest,
    ) -> Result<Answered<EventStream>, AllModelsFailed> {
        self.first_answer(models, request, |provider, request| async move { provider.stream(request).await }).await
    }

    async fn first_answer<T, F, Fut>(
        &self,
        models: &[ModelRef],
        request: ChatRequest,
        call: F,
    ) -> Result<Answered<T>, AllModelsFailed>
    where
        F: Fn(Arc<dyn Provider>, ChatRequest) -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let mut failed = Vec::new();
        for model in models {
            let outcome = match self.get(model) {
                Ok(provider) => call(provider, ChatRequest { model: model.model.clone(), ..request.clone() }).await,
                Err(error) => Err(error),
            };
            match outcome {
                Ok(output) => return Ok(Answered { model: model.clone(), output, failed }),
                Err(error) => {
                    // While a provider is down every request fails on it the same way (and once
                    // its circuit is open, at once): one line per model and kind per interval.
                    static MODEL_FAILED: Throttle = Throttle::new();
                    if let Some(suppressed) = MODEL_FAILED.admit(&format!("{model} {:?}", error.kind)) {
                        tracing::warn!(model = %model, kind = ?error.kind, cause = %error.message, suppressed, "model failed");
                    }
                    failed.push(ModelFailure { model: model.clone(), error });
                }
            }
        }
        Err(AllModelsFailed { failures: failed })
    }
}
