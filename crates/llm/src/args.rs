//! The providers' command-line flags (each with its environment variable) and building the
//! registry from them.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use clap::Args;
use switchyard_kit::{Secret, config::parse_duration};

use crate::{Anthropic, DeploymentSettings, Deployments, OpenAi, Provider, ProviderConfig, Providers};

/// Which vendors to reach and how. A provider is registered when its key or its base URL is
/// set (a local OpenAI-compatible server needs only the URL). Several keys and/or base URLs
/// (`OPENAI_API_KEYS`, `OPENAI_BASE_URLS`, comma-separated) make several deployments of one
/// provider, balanced with a cooldown for those that fail ([`Deployments`]).
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// OpenAI-compatible API root, with `/v1` (vLLM: http://host:8000/v1, Ollama:
    /// http://host:11434/v1). Default https://api.openai.com/v1 when only a key is given.
    #[arg(long, env = "OPENAI_BASE_URL")]
    pub openai_base_url: Option<String>,

    /// Several OpenAI-compatible API roots, comma-separated: one deployment each (instead of
    /// OPENAI_BASE_URL).
    #[arg(long, env = "OPENAI_BASE_URLS", value_delimiter = ',')]
    pub openai_base_urls: Vec<String>,

    /// Key for the OpenAI-compatible API, sent as a Bearer token.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<Secret>,

    /// Several keys for the OpenAI-compatible API, comma-separated: one deployment each
    /// (instead of OPENAI_API_KEY); paired in order with OPENAI_BASE_URLS when both list several.
    #[arg(long, env = "OPENAI_API_KEYS", hide_env_values = true, value_delimiter = ',')]
    pub openai_api_keys: Vec<Secret>,

    /// Longest wait for the OpenAI response headers, and between two streamed chunks.
    #[arg(long, env = "OPENAI_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub openai_timeout: Duration,

    /// Anthropic API root, without `/v1`. Default https://api.anthropic.com when only a key is given.
    #[arg(long, env = "ANTHROPIC_BASE_URL")]
    pub anthropic_base_url: Option<String>,

    /// Several Anthropic API roots, comma-separated: one deployment each (instead of
    /// ANTHROPIC_BASE_URL).
    #[arg(long, env = "ANTHROPIC_BASE_URLS", value_delimiter = ',')]
    pub anthropic_base_urls: Vec<String>,

    /// Key for the Anthropic API, sent as `x-api-key`.
    #[arg(long, env = "ANTHROPIC_API_KEY", hide_env_values = true)]
    pub anthropic_api_key: Option<Secret>,

    /// Several keys for the Anthropic API, comma-separated: one deployment each (instead of
    /// ANTHROPIC_API_KEY); paired in order with ANTHROPIC_BASE_URLS when both list several.
    #[arg(long, env = "ANTHROPIC_API_KEYS", hide_env_values = true, value_delimiter = ',')]
    pub anthropic_api_keys: Vec<Secret>,

    /// Longest wait for the Anthropic response headers, and between two streamed chunks.
    #[arg(long, env = "ANTHROPIC_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub anthropic_timeout: Duration,

    /// Retries of one call to one provider (429, 5xx, connection errors), before falling back
    /// to the next model. With several deployments, each retry goes to another deployment.
    #[arg(long, env = "UNIFIED_CHAT_MAX_RETRIES", default_value_t = 2)]
    pub max_retries: u32,

    /// How long a deployment that failed (429, 5xx, timeout) is skipped when the vendor gave no
    /// Retry-After; it doubles with each failure in a row, up to 16 times this.
    #[arg(long, env = "UNIFIED_CHAT_DEPLOYMENT_COOLDOWN", default_value = "5s", value_parser = parse_duration)]
    pub deployment_cooldown: Duration,
}

impl Default for ProviderArgs {
    /// The flags' defaults (no provider), whatever the environment holds.
    fn default() -> Self {
        switchyard_kit::config::flag_defaults()
    }
}

/// One vendor's settings as given: the single and the listed forms of its URL and key.
struct VendorFlags<'a> {
    url: &'a Option<String>,
    urls: &'a [String],
    key: &'a Option<Secret>,
    keys: &'a [Secret],
    url_var: &'static str,
    key_var: &'static str,
    default_base_url: &'static str,
    timeout: Duration,
}

impl ProviderArgs {
    /// The configured providers: `openai` and/or `anthropic`; none when nothing is set.
    pub fn build(&self) -> anyhow::Result<Providers> {
        let mut providers = Providers::default();
        let openai = VendorFlags {
            url: &self.openai_base_url,
            urls: &self.openai_base_urls,
            key: &self.openai_api_key,
            keys: &self.openai_api_keys,
            url_var: "OPENAI_BASE_URL",
            key_var: "OPENAI_API_KEY",
            default_base_url: OpenAi::DEFAULT_BASE_URL,
            timeout: self.openai_timeout,
        };
        let configs = self.deployments(&openai)?;
        if let Some(provider) = self.provider(configs, |config| Ok(Arc::new(OpenAi::new(config)?)))? {
            providers.insert(provider);
        }
        let anthropic = VendorFlags {
            url: &self.anthropic_base_url,
            urls: &self.anthropic_base_urls,
            key: &self.anthropic_api_key,
            keys: &self.anthropic_api_keys,
            url_var: "ANTHROPIC_BASE_URL",
            key_var: "ANTHROPIC_API_KEY",
            default_base_url: Anthropic::DEFAULT_BASE_URL,
            timeout: self.anthropic_timeout,
        };
        let configs = self.deployments(&anthropic)?;
        if let Some(provider) = self.provider(configs, |config| Ok(Arc::new(Anthropic::new(config)?)))? {
            providers.insert(provider);
        }
        Ok(providers)
    }

    /// One deployment: the vendor as configured. Several: each without retries of its own,
    /// behind one [`Deployments`] that retries on the next deployment.
    fn provider(
        &self,
        configs: Vec<ProviderConfig>,
        make: impl Fn(ProviderConfig) -> Result<Arc<dyn Provider>, crate::ProviderError>,
    ) -> anyhow::Result<Option<Arc<dyn Provider>>> {
        match configs.len() {
            0 => Ok(None),
            1 => {
                let config = configs.into_iter().next().context("one deployment")?;
                Ok(Some(make(config).context("configuring an LLM provider")?))
            }
            _ => {
                let members = configs
                    .into_iter()
                    .map(|config| make(config.with_max_retries(0)))
                    .collect::<Result<Vec<_>, _>>()
                    .context("configuring an LLM provider's deployments")?;
                let settings = DeploymentSettings::new(self.deployment_cooldown, self.max_retries);
                Ok(Some(Arc::new(Deployments::new(members, settings).map_err(anyhow::Error::msg)?)))
            }
        }
    }

    /// The vendor's deployments: none when neither a key nor a URL is set; one per listed key
    /// or URL, a single one going with each of the other list, two lists paired in order.
    fn deployments(&self, flags: &VendorFlags<'_>) -> anyhow::Result<Vec<ProviderConfig>> {
        let urls_var = format!("{}S", flags.url_var);
        let keys_var = format!("{}S", flags.key_var);
        // An empty variable (`OPENAI_API_KEY=` in a compose file) means unset.
        let url = flags.url.as_deref().map(str::trim).filter(|url| !url.is_empty());
        let key = flags.key.clone().filter(|key| !key.expose().trim().is_empty());
        let urls = listed(flags.urls.iter().map(|url| url.trim().to_owned()), &urls_var)?;
        let keys = listed(flags.keys.iter().map(|key| key.expose().trim().to_owned()), &keys_var)?;
        let urls: Vec<String> = match (url, urls.is_empty()) {
            (Some(_), false) => anyhow::bail!("set {} or {urls_var}, not both", flags.url_var),
            (Some(url), true) => vec![url.to_owned()],
            (None, _) => urls,
        };
        let keys: Vec<Option<Secret>> = match (key, keys.is_empty()) {
            (Some(_), false) => anyhow::bail!("set {} or {keys_var}, not both", flags.key_var),
            (Some(key), true) => vec![Some(key)],
            (None, _) => keys.into_iter().map(|key| Some(Secret::new(key))).collect(),
        };
        if urls.is_empty() && keys.is_empty() {
            return Ok(Vec::new());
        }
        if urls.len() > 1 && keys.len() > 1 && urls.len() != keys.len() {
            anyhow::bail!(
                "{urls_var} lists {} URLs and {keys_var} {} keys: give one of either, or as many of each (paired in order)",
                urls.len(),
                keys.len()
            );
        }
        let count = urls.len().max(keys.len());
        let urls = if urls.is_empty() { vec![flags.default_base_url.to_owned()] } else { urls };
        let keys = if keys.is_empty() { vec![None] } else { keys };
        Ok((0..count)
            .map(|position| {
                ProviderConfig::new(&urls[position.min(urls.len() - 1)])
                    .with_api_key(keys[position.min(keys.len() - 1)].clone())
                    .with_timeout(flags.timeout)
                    .with_max_retries(self.max_retries)
            })
            .collect())
    }
}

/// A comma-separated list's entries; none for an empty variable, an error naming the variable
/// and the position for an empty entry (`a,,b`).
fn listed(entries: impl Iterator<Item = String>, var: &str) -> anyhow::Result<Vec<String>> {
    let entries: Vec<String> = entries.collect();
    if entries.iter().all(String::is_empty) {
        return Ok(Vec::new());
    }
    if let Some(position) = entries.iter().position(String::is_empty) {
        anyhow::bail!("{var} has an empty entry at position {}", position + 1);
    }
    Ok(entries)
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

    fn openai_deployments(args: &[&str]) -> anyhow::Result<Vec<(String, Option<String>)>> {
        let args = Cli::try_parse_from(["x"].iter().chain(args)).unwrap().providers;
        let flags = VendorFlags {
            url: &args.openai_base_url,
            urls: &args.openai_base_urls,
            key: &args.openai_api_key,
            keys: &args.openai_api_keys,
            url_var: "OPENAI_BASE_URL",
            key_var: "OPENAI_API_KEY",
            default_base_url: OpenAi::DEFAULT_BASE_URL,
            timeout: args.openai_timeout,
        };
        let configs = args.deployments(&flags)?;
        Ok(configs.into_iter().map(|c| (c.base_url, c.api_key.map(|k| k.expose().to_owned()))).collect())
    }

    #[test]
    fn several_keys_or_urls_are_several_deployments() {
        let default = OpenAi::DEFAULT_BASE_URL.to_owned();
        assert_eq!(openai_deployments(&["--openai-api-key", "k1"]).unwrap(), [(default.clone(), Some("k1".into()))]);
        assert_eq!(
            openai_deployments(&["--openai-api-keys", "k1, k2"]).unwrap(),
            [(default.clone(), Some("k1".into())), (default, Some("k2".into()))]
        );
        assert_eq!(
            openai_deployments(&["--openai-base-urls", "http://a/v1,http://b/v1", "--openai-api-key", "k"]).unwrap(),
            [("http://a/v1".into(), Some("k".into())), ("http://b/v1".into(), Some("k".into()))]
        );
        assert_eq!(
            openai_deployments(&["--openai-base-urls", "http://a/v1,http://b/v1", "--openai-api-keys", "ka,kb"])
                .unwrap(),
            [("http://a/v1".into(), Some("ka".into())), ("http://b/v1".into(), Some("kb".into()))]
        );
        assert_eq!(
            openai_deployments(&["--openai-base-urls", "http://a/v1,http://b/v1"]).unwrap(),
            [("http://a/v1".into(), None), ("http://b/v1".into(), None)]
        );
        assert!(openai_deployments(&[]).unwrap().is_empty());

        let refused = |args: &[&str]| openai_deployments(args).unwrap_err().to_string();
        let both = refused(&["--openai-api-key", "k", "--openai-api-keys", "k1,k2"]);
        assert_eq!(both, "set OPENAI_API_KEY or OPENAI_API_KEYS, not both");
        let uneven = refused(&["--openai-base-urls", "http://a/v1,http://b/v1", "--openai-api-keys", "k1,k2,k3"]);
        assert!(uneven.contains("OPENAI_BASE_URLS lists 2 URLs and OPENAI_API_KEYS 3 keys"), "{uneven}");
        let hole = refused(&["--openai-api-keys", "k1,,k3"]);
        assert_eq!(hole, "OPENAI_API_KEYS has an empty entry at position 2");
        assert!(!hole.contains("k1") && !uneven.contains("k1"), "no key in an error");
    }
}
