//! The authorization flags (`--auth` and the `--oauth-*` settings), checked together at start
//! so a half-configured protected resource never serves.

use std::{path::PathBuf, time::Duration};

use clap::Args;
use switchyard_kit::config::parse_duration;

/// Who may use the MCP endpoint (see `--auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AuthMode {
    /// No credential: identity headers are trusted as sent (development only).
    #[default]
    Open,
    /// The edge's API keys (`Authorization: Bearer sy_…` or `x-api-key`).
    Keys,
    /// OAuth 2.1 bearer JWTs per the MCP authorization spec (and API keys, when a key table
    /// is named).
    Oauth,
}

#[derive(Debug, Clone, Args)]
pub struct AuthArgs {
    /// Who may use the MCP endpoint: `open` (no credential, the identity headers trusted as
    /// sent: development only), `keys` (the edge's API keys) or `oauth` (an OAuth 2.1
    /// protected resource: bearer JWTs from --oauth-issuer for --oauth-audience).
    #[arg(long = "auth", env = "MCP_GATEWAY_AUTH", value_enum, default_value_t = AuthMode::Open)]
    pub mode: AuthMode,

    /// The authorization server whose tokens are accepted: the exact `iss` of its tokens and
    /// the issuer its metadata names (RFC 8414).
    #[arg(long, env = "MCP_GATEWAY_OAUTH_ISSUER", value_name = "URL")]
    pub oauth_issuer: Option<String>,

    /// This resource's identifier: tokens must name it in `aud` (RFC 8707), and the
    /// protected resource metadata names it as `resource`. Usually the endpoint's public URL,
    /// e.g. `https://mcp.example.com/mcp`.
    #[arg(long, env = "MCP_GATEWAY_OAUTH_AUDIENCE", value_name = "URI")]
    pub oauth_audience: Option<String>,

    /// The authorization server's public keys (a JWKS file, re-read when it changes).
    #[arg(long, env = "MCP_GATEWAY_OAUTH_JWKS_FILE", value_name = "FILE", conflicts_with = "oauth_jwks_url")]
    pub oauth_jwks_file: Option<PathBuf>,

    /// The authorization server's JWKS URL, fetched at start and again (at most every 30s)
    /// when a token names an unknown key. Without this or --oauth-jwks-file, the `jwks_uri`
    /// of the issuer's metadata.
    #[arg(long, env = "MCP_GATEWAY_OAUTH_JWKS_URL", value_name = "URL")]
    pub oauth_jwks_url: Option<String>,

    /// Scopes a token must carry to use the endpoint at all (repeatable or comma-separated;
    /// `none` requires none). Policies may select on further scopes.
    #[arg(long, env = "MCP_GATEWAY_OAUTH_REQUIRED_SCOPE", value_delimiter = ',', default_values_t = ["mcp:tools".to_owned()])]
    pub oauth_required_scope: Vec<String>,

    /// Claims naming the caller's tenant, the first present wins; without any, the default
    /// tenant.
    #[arg(long, env = "MCP_GATEWAY_OAUTH_TENANT_CLAIM", value_delimiter = ',', default_values_t = ["tenant".to_owned(), "tenant_id".to_owned()])]
    pub oauth_tenant_claim: Vec<String>,

    /// Clock skew allowed on `exp` and `nbf`.
    #[arg(long, env = "MCP_GATEWAY_OAUTH_LEEWAY", default_value = "30s", value_parser = parse_duration)]
    pub oauth_leeway: Duration,

    /// Postgres schema of the edge's API key table (DATABASE_URL's database). `keys` mode
    /// reads `edge` unless told otherwise; `oauth` mode accepts API keys only when this is set.
    #[arg(long, env = "MCP_GATEWAY_KEYS_DB_SCHEMA", value_name = "SCHEMA")]
    pub keys_db_schema: Option<String>,

    /// How long a key check is remembered (a revoked key keeps working this long at most).
    #[arg(long, env = "MCP_GATEWAY_KEY_CACHE_TTL", default_value = "30s", value_parser = parse_duration)]
    pub key_cache_ttl: Duration,
}

impl Default for AuthArgs {
    /// The flags' defaults (open), whatever the environment holds.
    fn default() -> Self {
        switchyard_kit::config::flag_defaults()
    }
}

impl AuthArgs {
    /// The key table's schema, if API keys are accepted in this mode.
    pub fn key_schema(&self) -> Option<&str> {
        match self.mode {
            AuthMode::Open => None,
            AuthMode::Keys => Some(self.keys_db_schema.as_deref().unwrap_or("edge")),
            AuthMode::Oauth => self.keys_db_schema.as_deref(),
        }
    }

    /// The scopes every token must carry.
    pub fn required_scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> =
            self.oauth_required_scope.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
        if scopes.iter().any(|s| s == "none") {
            scopes.clear();
        }
        scopes
    }

    /// The combination makes sense: errors name the flag.
    pub fn validate(&self) -> Result<(), String> {
        let oauth_flags = [
            ("--oauth-issuer", self.oauth_issuer.is_some()),
            ("--oauth-audience", self.oauth_audience.is_some()),
            ("--oauth-jwks-file", self.oauth_jwks_file.is_some()),
            ("--oauth-jwks-url", self.oauth_jwks_url.is_some()),
        ];
        if self.mode != AuthMode::Oauth {
            if let Some((flag, _)) = oauth_flags.iter().find(|(_, set)| *set) {
                return Err(format!("{flag} needs --auth oauth (MCP_GATEWAY_AUTH=oauth)"));
            }
            return Ok(());
        }
        let issuer =
            self.oauth_issuer.as_deref().ok_or("--auth oauth needs --oauth-issuer (MCP_GATEWAY_OAUTH_ISSUER)")?;
        check_url("--oauth-issuer", issuer)?;
        let audience =
            self.oauth_audience.as_deref().ok_or("--auth oauth needs --oauth-audience (MCP_GATEWAY_OAUTH_AUDIENCE)")?;
        check_url("--oauth-audience", audience)?;
        if let Some(url) = &self.oauth_jwks_url {
            check_url("--oauth-jwks-url", url)?;
        }
        for scope in self.required_scopes() {
            if !scope.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\') {
                return Err(format!("--oauth-required-scope: `{scope}` is not an OAuth scope token"));
            }
        }
        if self.oauth_tenant_claim.iter().all(|c| c.trim().is_empty()) {
            return Err("--oauth-tenant-claim: name at least one claim".into());
        }
        Ok(())
    }
}

/// An absolute http(s) URL without a fragment (RFC 8414 and RFC 9728 identifiers).
fn check_url(flag: &str, text: &str) -> Result<(), String> {
    let uri: http::Uri = text.parse().map_err(|err| format!("{flag}: `{text}` is not a URL: {err}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() || text.contains('#') {
        return Err(format!("{flag}: `{text}` must be an absolute http(s) URL without a fragment"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth() -> AuthArgs {
        AuthArgs {
            mode: AuthMode::Oauth,
            oauth_issuer: Some("https://idp.example".into()),
            oauth_audience: Some("https://mcp.example/mcp".into()),
            ..AuthArgs::default()
        }
    }

    #[test]
    fn combinations_are_checked_and_name_the_flag() {
        assert_eq!(AuthArgs::default().validate(), Ok(()));
        assert_eq!(oauth().validate(), Ok(()));
        let no_issuer = AuthArgs { oauth_issuer: None, ..oauth() };
        assert!(no_issuer.validate().unwrap_err().contains("--oauth-issuer"));
        let no_audience = AuthArgs { oauth_audience: None, ..oauth() };
        assert!(no_audience.validate().unwrap_err().contains("--oauth-audience"));
        let relative = AuthArgs { oauth_audience: Some("/mcp".into()), ..oauth() };
        assert!(relative.validate().unwrap_err().contains("--oauth-audience"));
        let stray =
            AuthArgs { mode: AuthMode::Keys, oauth_issuer: Some("https://idp.example".into()), ..AuthArgs::default() };
        assert!(stray.validate().unwrap_err().contains("--oauth-issuer needs --auth oauth"));
        let scope = AuthArgs { oauth_required_scope: vec!["a\"b".into()], ..oauth() };
        assert!(scope.validate().unwrap_err().contains("--oauth-required-scope"));
    }

    #[test]
    fn keys_and_scopes_per_mode() {
        assert_eq!(AuthArgs { mode: AuthMode::Keys, ..AuthArgs::default() }.key_schema(), Some("edge"));
        assert_eq!(oauth().key_schema(), None);
        assert_eq!(AuthArgs::default().key_schema(), None);
        assert_eq!(oauth().required_scopes(), ["mcp:tools"]);
        assert!(AuthArgs { oauth_required_scope: vec!["none".into()], ..oauth() }.required_scopes().is_empty());
    }
}
