//! Model names with their provider: `openai/<model>`, `anthropic/<model>`.

use std::{fmt, str::FromStr};

/// A model as `<provider>/<model>`. The provider is a short name (`openai`, `anthropic`,
/// `local`); the model is what the vendor calls it and may itself contain `/`
/// (`openai/meta-llama/Llama-3-8B` names `meta-llama/Llama-3-8B` on an OpenAI-compatible server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self { provider: provider.into(), model: model.into() }
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

impl FromStr for ModelRef {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let (provider, model) = value.split_once('/').ok_or_else(|| {
            format!("`{value}` must be named with its provider, as `openai/<model>` or `anthropic/<model>`")
        })?;
        if provider.is_empty() || model.is_empty() {
            return Err(format!("`{value}` must be named as `<provider>/<model>`"));
        }
        Ok(Self::new(provider, model))
    }
}
