//! The providers' command-line flags (each with its environment variable) and building the
//! registry from them.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use clap::Args;
use switchyard_kit::{Secret, config::parse_duration};

use crate::{Anthropic, OpenAi, ProviderConfig, Providers};

/// Which vendors to reach and how. A provider is registered when its key or its base URL is
/// set (a local OpenAI-compatible server needs only the URL).
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// OpenAI-compatible API root, with `/v1` (vLLM: http://host:8000/v1, Ollama:
    /// http://host:11434/v1). Default https://api.openai.com/v1 when only a key is given.
    #[arg(long, env = "OPENAI_BASE_URL")]
    pub openai_base_url: Option<String>,

    /// Key for the OpenAI-compatible API, sent as a Bearer token.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<Secret>,

    /// Longest wait for the OpenAI response headers, and between two streamed chunks.
    #[arg(long, env = "OPENAI_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub openai_timeout: Duration,

    /// Anthropic API root, without `/v1`. Default https://api.anthropic.com when only a key is given.
    #[arg(long, env = "ANTHROPIC_BASE_URL")]
    pub anthropic_base_url: Option<String>,

    /// Key for the Anthropic API, sent as `x-api-key`.
    #[arg(long, env = "ANTHROPIC_API_KEY", hide_env_values = true)]
    pub anthropic_api_key: Option<Secret>,

    /// Longest wait for the Anthropic response headers, and between two streamed chunks.
    #[arg(long, env = "ANTHROPIC_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub anthropic_timeout: Duration,

    /// Retries of one call to one provider (429, 5xx, connection errors), before falling back
    /// to the next model.
    #[arg(long, env = "UNIFIED_CHAT_MAX_RETRIES", default_value_t = 2)]
    pub max_retries: u32,
}

impl Default for ProviderArgs {
    /// The flags' defaults (no provider), whatever the environment holds.
    fn default() -> Self {
        switchyard_kit::config::flag_defaults()
    }
}

impl ProviderArgs {
    /// The configured providers: `openai` and/or `anthropic`; none when nothing is set.
    pub fn build(&self) -> anyhow::Result<Providers> {
        let mut providers = Providers::default();
        if let Some(config) =
            self.config(&self.openai_base_url, &self.openai_api_key, OpenAi::DEFAULT_BASE_URL, self.openai_timeout)
        {
            providers.insert(Arc::new(OpenAi::new(config).context("configuring the OpenAI provider")?));
        }
        if let Some(config) = self.config(
            &self.anthropic_base_url,
            &self.anthropic_api_key,
            Anthropic::DEFAULT_BASE_URL,
            self.anthropic_timeout,
        ) {
            providers.insert(Arc::new(Anthropic::new(config).context("configuring the Anthropic provider")?));
        }
        Ok(providers)
    }

    fn config(
        &self,
        base_url: &Option<String>,
        api_key: &Option<Secret>,
        default_base_url: &str,
        timeout: Duration,
    ) -> Option<ProviderConfig> {
        // An empty variable (`OPENAI_API_KEY=` in a compose file) means unset.
        let base_url = base_url.as_deref().map(str::trim).filter(|url| !url.is_empty());
        let api_key = api_key.clone().filter(|key| !key.expose().trim().is_empty());
        if base_url.is_none() && api_key.is_none() {
            return None;
        }
        Some(
            ProviderConfig::new(base_url.unwrap_or(default_base_url))
                .with_api_key(api_key)
                .with_timeout(timeout)
                .with_max_retries(self.max_retries),
        )
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        providers: ProviderArgs,
    }

    #[test]
    fn a_provider_is_registered_by_its_key_or_its_url() {
        let none = Cli::try_parse_from(["x"]).unwrap().providers;
        assert_eq!((none.max_retries, none.openai_timeout), (2, Duration::from_secs(60)));
        assert!(ProviderArgs::default().build().unwrap().is_empty());

        let args = Cli::try_parse_from([
            "x",
            "--openai-base-url",
            "http://127.0.0.1:8000/v1",
            "--anthropic-api-key",
            "sk-ant-secret",
            "--anthropic-timeout",
            "5s",
            "--max-retries",
            "4",
        ])
        .unwrap()
        .providers;
        assert_eq!(args.anthropic_timeout, Duration::from_secs(5));
        assert!(!format!("{args:?}").contains("sk-ant-secret"));
        let mut names: Vec<_> = args.build().unwrap().names().map(str::to_owned).collect();
        names.sort();
        assert_eq!(names, ["anthropic", "openai"]);

        let blank = ProviderArgs { openai_api_key: Some(Secret::new("")), ..ProviderArgs::default() };
        assert!(blank.build().unwrap().is_empty());
    }
}
