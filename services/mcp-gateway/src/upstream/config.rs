//! Where the upstream MCP servers come from: a config file (TOML, or JSON in the
//! `mcpServers` shape desktop MCP clients use) and the repeatable `--server` flag.
//!
//! ```toml
//! [servers.files]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]
//! env = { NODE_OPTIONS = "--max-old-space-size=256" }
//!
//! [servers.search]
//! url = "https://search.internal/mcp"
//! headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }
//! ```
//!
//! `${VAR}` in `env` values, header values and the URL is replaced by the gateway's own
//! environment variable, so secrets stay in Kubernetes Secrets rather than the file. An `env` or
//! header value may instead name where its secret is kept — `{ env = "VAR" }` or
//! `{ file = "/run/secrets/x" }`, with an optional `prefix` such as `"Bearer "` — and an HTTP
//! server may have the gateway fetch its bearer token with OAuth client credentials
//! (`oauth = { token_url = …, client_id = …, client_secret = { env = … } }`, see
//! [`super::credentials`]). Secrets are read at load (a missing one is an error naming the server
//! and the field) and again on every connection, so a rotated secret file takes effect without
//! a restart.

use std::{collections::BTreeMap, fmt, path::Path};

use serde::Deserialize;

/// Headers the MCP transport sets itself, which a server's `headers` may not.
const RESERVED_HEADERS: &[&str] =
    &["accept", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// Longest server name: it prefixes every tool name, and a tool name is at most 64 characters.
pub const MAX_SERVER_NAME: usize = 24;

/// How the gateway reaches one upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, ConfigValue>, cwd: Option<String> },
    /// A streamable HTTP endpoint.
    Http { url: String, headers: BTreeMap<String, ConfigValue>, oauth: Option<OAuthClient> },
}

/// Where a configured value comes from. Only a literal without `${…}` is shown by `Debug`; the
/// others show where they are read from, never what was read.
#[derive(Clone, PartialEq, Eq)]
pub enum ValueSource {
    /// Text from the file, `${VAR}` references replaced by the gateway's environment.
    Text(String),
    /// The gateway's environment variable of this name, whole.
    Env(String),
    /// A file's contents (a mounted secret), without its trailing newline.
    File(String),
}

/// One `env` or header value: where it comes from, and its value as last read. Two values are
/// equal when they are read from the same place, whatever the place holds now.
#[derive(Clone)]
pub struct ConfigValue {
    source: ValueSource,
    prefix: String,
    resolved: String,
}

impl ConfigValue {
    /// A value given in plain text (no references).
    pub fn text(value: impl Into<String>) -> Self {
        let value = value.into();
        Self { source: ValueSource::Text(value.clone()), prefix: String::new(), resolved: value }
    }

    /// The value as read at load, for the one place that hands it to a server.
    pub fn expose(&self) -> &str {
        &self.resolved
    }

    pub fn source(&self) -> &ValueSource {
        &self.source
    }

    /// Whether the value holds anything read from the environment or a file (and so must not
    /// be shown).
    pub fn is_secret(&self) -> bool {
        !matches!(&self.source, ValueSource::Text(text) if !text.contains("${"))
    }

    /// Reads the value again from where it comes from (a rotated secret file, a changed
    /// variable); `field` names it in the error.
    pub fn reread(&self, field: &str) -> Result<String, String> {
        read_source(&self.source, &self.prefix, field, &|name| std::env::var(name).ok())
    }
}

impl PartialEq for ConfigValue {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.prefix == other.prefix
    }
}

impl Eq for ConfigValue {}

impl fmt::Debug for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            // The template, not its expansion: `"Bearer ${TOKEN}"`.
            ValueSource::Text(text) => write!(f, "{text:?}"),
            ValueSource::Env(name) => write!(f, "{{ prefix = {:?}, env = {name:?} }}", self.prefix),
            ValueSource::File(path) => write!(f, "{{ prefix = {:?}, file = {path:?} }}", self.prefix),
        }
    }
}

/// How the gateway authenticates to a token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (what the RFC says servers must support).
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Body,
}

/// An OAuth client-credentials grant (RFC 6749 §4.4) the gateway runs for one HTTP server: the
/// token it gets is sent to that server only, as `Authorization: Bearer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub token_url: String,
    pub client_id: String,
    pub client_secret: ConfigValue,
    pub scope: Option<String>,
    /// Sent as `audience` (what Auth0, Okta and others expect) and as `resource` (RFC 8707).
    pub audience: Option<String>,
    pub client_auth: ClientAuth,
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "streamable-http",
        }
    }
}

/// One upstream server, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub name: String,
    pub transport: Transport,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{origin}: {reason}")]
    Invalid { origin: String, reason: String },
}

fn invalid(origin: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { origin: origin.to_owned(), reason: reason.into() }
}

/// The file's shape, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    /// In file order: the first-configured server keeps a contested tool name.
    #[serde(default, alias = "mcpServers")]
    servers: indexmap::IndexMap<String, FileServer>,
    /// Who may see and call which tool ([`crate::policy`]).
    #[serde(default)]
    policies: Vec<crate::policy::PolicySpec>,
}

/// Everything a servers file configures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileContents {
    pub servers: Vec<UpstreamSpec>,
    pub policies: crate::policy::Policies,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, FileValue>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, FileValue>,
    oauth: Option<FileOAuth>,
    /// Accepted for compatibility with desktop-client files (`"stdio"`, `"http"`,
    /// `"streamable-http"`); the transport follows from `command` or `url`.
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

/// A value as written: text, or where a secret is kept.
#[derive(Debug)]
enum FileValue {
    Text(String),
    Secret(FileSecret),
}

impl<'de> Deserialize<'de> for FileValue {
    // By hand rather than `untagged`, so a mistake in a secret's table is named (`unknown
    // field`), not "did not match any variant".
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FileValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a string, or a table `{ env = \"VAR\" }` or `{ file = \"/path\" }` with an optional `prefix`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<FileValue, E> {
                Ok(FileValue::Text(value.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<FileValue, A::Error> {
                FileSecret::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(FileValue::Secret)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSecret {
    env: Option<String>,
    file: Option<String>,
    #[serde(default)]
    prefix: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOAuth {
    token_url: String,
    client_id: String,
    client_secret: FileValue,
    scope: Option<String>,
    audience: Option<String>,
    #[serde(default)]
    client_auth: ClientAuth,
}

/// Reads and validates a config file; `.json` files are JSON, anything else TOML.
pub fn load_file(path: &Path) -> Result<Vec<UpstreamSpec>, ConfigError> {
    Ok(load_contents(path)?.servers)
}

/// Reads and validates a config file: its servers and its policies.
pub fn load_contents(path: &Path) -> Result<FileContents, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| invalid(&origin, format!("cannot read: {err}")))?;
    let is_json = path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    parse_contents(&origin, &text, is_json, &|name| std::env::var(name).ok())
}

/// Parses a config file's text. `lookup` resolves `${VAR}` references.
pub fn parse_file(
    origin: &str,
    text: &str,
    json: bool,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<UpstreamSpec>, ConfigError> {
    Ok(parse_contents(origin, text, json, lookup)?.servers)
}

/// Parses a config file's text: servers and policies. `lookup` resolves `${VAR}` references.
pub fn parse_contents(
    origin: &str,
    text: &str,
    json: bool,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<FileContents, ConfigError> {
    let file: FileConfig = if json {
        serde_json::from_str(text).map_err(|err| invalid(origin, err.to_string()))?
    } else {
        toml::from_str(text).map_err(|err| invalid(origin, err.to_string()))?
    };
    let policies = crate::policy::validate(file.policies).map_err(|why| invalid(origin, why))?;
    let servers = file
        .servers
        .into_iter()
        .map(|(name, server)| {
            let at = format!("{origin}: servers.{name}");
            check_name(&at, &name)?;
            let transport = match (server.command, server.url) {
                (Some(_), Some(_)) => return Err(invalid(&at, "set either `command` or `url`, not both")),
                (None, None) => return Err(invalid(&at, "set `command` (stdio) or `url` (streamable HTTP)")),
                (Some(command), None) => {
                    if !server.headers.is_empty() {
                        return Err(invalid(&at, "`headers` apply to `url` servers only"));
                    }
                    check_kind(&at, server.kind.as_deref(), "stdio")?;
                    if command.trim().is_empty() {
                        return Err(invalid(&at, "`command` is empty"));
                    }
                    if server.oauth.is_some() {
                        return Err(invalid(&at, "`oauth` applies to `url` servers only"));
                    }
                    let env = server
                        .env
                        .into_iter()
                        .map(|(key, value)| {
                            let value = config_value(&at, &format!("env.{key}"), value, lookup)?;
                            Ok((key, value))
                        })
                        .collect::<Result<_, ConfigError>>()?;
                    Transport::Stdio { command, args: server.args, env, cwd: server.cwd }
                }
                (None, Some(url)) => {
                    if !server.args.is_empty() || !server.env.is_empty() || server.cwd.is_some() {
                        return Err(invalid(&at, "`args`, `env` and `cwd` apply to `command` servers only"));
                    }
                    check_kind(&at, server.kind.as_deref(), "http")?;
                    let url = expand(&url, lookup).map_err(|why| invalid(&at, format!("`url`: {why}")))?;
                    check_url(&at, &url)?;
                    let headers: BTreeMap<String, ConfigValue> = server
                        .headers
                        .into_iter()
                        .map(|(key, value)| {
                            http::HeaderName::try_from(key.as_str())
                                .map_err(|_| invalid(&at, format!("header name `{key}` is not valid")))?;
                            if RESERVED_HEADERS.iter().any(|reserved| key.eq_ignore_ascii_case(reserved)) {
                                return Err(invalid(&at, format!("header `{key}` is set by the gateway")));
                            }
                            let value = config_value(&at, &format!("headers.{key}"), value, lookup)?;
                            http::HeaderValue::try_from(value.expose())
                                .map_err(|_| invalid(&at, format!("header `{key}` has a value that is not valid")))?;
                            Ok((key, value))
                        })
                        .collect::<Result<_, ConfigError>>()?;
                    let oauth = server.oauth.map(|oauth| oauth_client(&at, oauth, lookup)).transpose()?;
                    if oauth.is_some() && headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
                        return Err(invalid(&at, "set `oauth` or an `Authorization` header, not both"));
                    }
                    Transport::Http { url, headers, oauth }
                }
            };
            Ok(UpstreamSpec { name, transport })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    Ok(FileContents { servers, policies: crate::policy::Policies::new(policies) })
}

/// Parses one `--server NAME=COMMAND [ARGS…]` or `--server NAME=http(s)://…` value. Arguments
/// are split on whitespace; use the config file for arguments containing spaces.
pub fn parse_flag(value: &str) -> Result<UpstreamSpec, ConfigError> {
    let origin = format!("--server {value}");
    let (name, target) =
        value.split_once('=').ok_or_else(|| invalid(&origin, "expected NAME=COMMAND [ARGS…] or NAME=http(s)://…"))?;
    let name = name.trim();
    check_name(&origin, name)?;
    let target = target.trim();
    let transport = if target.starts_with("http://") || target.starts_with("https://") {
        check_url(&origin, target)?;
        Transport::Http { url: target.to_owned(), headers: BTreeMap::new(), oauth: None }
    } else {
        let mut words = target.split_whitespace().map(str::to_owned);
        let command = words.next().ok_or_else(|| invalid(&origin, "the command is empty"))?;
        Transport::Stdio { command, args: words.collect(), env: BTreeMap::new(), cwd: None }
    };
    Ok(UpstreamSpec { name: name.to_owned(), transport })
}

/// Joins file and flag servers; a name may be used once.
pub fn merge(mut file: Vec<UpstreamSpec>, flags: Vec<UpstreamSpec>) -> Result<Vec<UpstreamSpec>, ConfigError> {
    for spec in flags {
        if file.iter().any(|existing| existing.name == spec.name) {
            return Err(invalid(&format!("--server {}", spec.name), "a server of this name is already configured"));
        }
        file.push(spec);
    }
    Ok(file)
}

/// Server names become tool-name prefixes: short, and only characters valid in a tool name,
/// without the `__` separator.
fn check_name(origin: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Err(invalid(origin, format!("server name must be 1 to {MAX_SERVER_NAME} characters")));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') || name.contains("__") {
        return Err(invalid(origin, format!("server name `{name}` may use only letters, digits, `-` and single `_`")));
    }
    Ok(())
}

fn check_kind(origin: &str, kind: Option<&str>, expected: &str) -> Result<(), ConfigError> {
    match (kind, expected) {
        (None, _) | (Some("stdio"), "stdio") | (Some("http" | "streamable-http" | "streamableHttp"), "http") => Ok(()),
        (Some(other), _) => Err(invalid(origin, format!("`type = \"{other}\"` does not match the server's settings"))),
    }
}

fn check_url(origin: &str, url: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url.parse().map_err(|_| invalid(origin, format!("`{url}` is not a valid URL")))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(invalid(origin, format!("`{url}` must be an http:// or https:// URL with a host"))),
    }
}

/// A value as written, validated and read.
fn config_value(
    origin: &str,
    field: &str,
    value: FileValue,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<ConfigValue, ConfigError> {
    let (source, prefix) = match value {
        FileValue::Text(text) => (ValueSource::Text(text), String::new()),
        FileValue::Secret(FileSecret { env: Some(name), file: None, prefix }) => {
            if name.is_empty() {
                return Err(invalid(origin, format!("`{field}`: `env` names no variable")));
            }
            (ValueSource::Env(name), prefix)
        }
        FileValue::Secret(FileSecret { env: None, file: Some(path), prefix }) => {
            if path.is_empty() {
                return Err(invalid(origin, format!("`{field}`: `file` names no file")));
            }
            (ValueSource::File(path), prefix)
        }
        FileValue::Secret(_) => {
            return Err(invalid(origin, format!("`{field}`: give exactly one of `env` and `file`")));
        }
    };
    let resolved = read_source(&source, &prefix, field, lookup).map_err(|why| invalid(origin, why))?;
    Ok(ConfigValue { source, prefix, resolved })
}

/// Reads a value from its source; the error names `field` and where it looked, never a value.
fn read_source(
    source: &ValueSource,
    prefix: &str,
    field: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let value = match source {
        ValueSource::Text(text) => expand(text, lookup).map_err(|why| format!("`{field}`: {why}"))?,
        ValueSource::Env(name) => {
            lookup(name).ok_or_else(|| format!("`{field}`: environment variable `{name}` is not set"))?
        }
        ValueSource::File(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|err| format!("`{field}`: cannot read `{path}`: {err}"))?;
            // Secret files written by `echo` or editors end in a newline no server expects.
            text.trim_end_matches(['\n', '\r']).to_owned()
        }
    };
    if value.is_empty() && !matches!(source, ValueSource::Text(_)) {
        return Err(format!("`{field}`: the secret read from {} is empty", describe(source)));
    }
    Ok(format!("{prefix}{value}"))
}

fn describe(source: &ValueSource) -> String {
    match source {
        ValueSource::Text(_) => "the file".to_owned(),
        ValueSource::Env(name) => format!("environment variable `{name}`"),
        ValueSource::File(path) => format!("`{path}`"),
    }
}

fn oauth_client(
    origin: &str,
    oauth: FileOAuth,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OAuthClient, ConfigError> {
    let token_url =
        expand(&oauth.token_url, lookup).map_err(|why| invalid(origin, format!("`oauth.token_url`: {why}")))?;
    check_url(&format!("{origin}: oauth.token_url"), &token_url)?;
    if oauth.client_id.trim().is_empty() {
        return Err(invalid(origin, "`oauth.client_id` is empty"));
    }
    let client_secret = config_value(origin, "oauth.client_secret", oauth.client_secret, lookup)?;
    if client_secret.expose().is_empty() {
        return Err(invalid(origin, "`oauth.client_secret` is empty"));
    }
    let non_empty = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    Ok(OAuthClient {
        token_url,
        client_id: oauth.client_id,
        client_secret,
        scope: non_empty(oauth.scope),
        audience: non_empty(oauth.audience),
        client_auth: oauth.client_auth,
    })
}

/// Replaces `${VAR}` with the variable's value; an unset variable is an error, not "".
fn expand(value: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or("unterminated `${` in a value")?;
        let name = &after[..end];
        let resolved = lookup(name).ok_or_else(|| format!("environment variable `{name}` is not set"))?;
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn toml_servers_of_both_kinds() {
        let text = r#"
            [servers.files]
            command = "npx"
            args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
            env = { KEY = "${TOKEN}" }
            [servers.search]
            url = "https://search.example/mcp"
            headers = { Authorization = "Bearer ${TOKEN}" }
        "#;
        let specs = parse_file("f.toml", text, false, &env).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].name, "files");
        assert!(matches!(&specs[0].transport, Transport::Stdio { env, .. } if env["KEY"].expose() == "s3cret"));
        assert!(matches!(&specs[1].transport, Transport::Http { headers, .. }
            if headers["Authorization"].expose() == "Bearer s3cret"));
        // Debug shows the template, never what it expanded to.
        assert!(!format!("{specs:?}").contains("s3cret"));
    }

    #[test]
    fn secrets_by_reference() {
        let text = r#"
            [servers.files]
            command = "x"
            env = { KEY = { env = "TOKEN" }, MODE = "plain" }
            [servers.search]
            url = "https://search.example/mcp"
            headers = { Authorization = { env = "TOKEN", prefix = "Bearer " } }
            [servers.billing]
            url = "https://billing.example/mcp"
            oauth = { token_url = "https://auth.example/token", client_id = "gw", client_secret = { env = "TOKEN" }, scope = "a b", client_auth = "body" }
        "#;
        let specs = parse_file("f.toml", text, false, &env).unwrap();
        let Transport::Stdio { env: vars, .. } = &specs[0].transport else { panic!("{specs:?}") };
        assert_eq!(vars["KEY"].expose(), "s3cret");
        assert!(vars["KEY"].is_secret() && !vars["MODE"].is_secret());
        let Transport::Http { headers, .. } = &specs[1].transport else { panic!("{specs:?}") };
        assert_eq!(headers["Authorization"].expose(), "Bearer s3cret");
        let Transport::Http { oauth: Some(oauth), .. } = &specs[2].transport else { panic!("{specs:?}") };
        assert_eq!(oauth.client_secret.expose(), "s3cret");
        assert_eq!((oauth.scope.as_deref(), oauth.client_auth), (Some("a b"), ClientAuth::Body));
        let shown = format!("{specs:?}");
        assert!(!shown.contains("s3cret") && shown.contains("TOKEN"), "{shown}");
    }

    #[test]
    fn desktop_client_json_shape() {
        let text =
            r#"{"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}}"#;
        let specs = parse_file("f.json", text, true, &env).unwrap();
        assert_eq!(specs[0].name, "memory");
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("[servers.a]\n", "set `command`"),
            ("[servers.a]\ncommand='x'\nurl='http://h/mcp'\n", "not both"),
            ("[servers.a]\nurl='ftp://h'\n", "http:// or https://"),
            ("[servers.a]\ncommand='x'\nenv={K='${MISSING}'}\n", "`MISSING` is not set"),
            ("[servers.a__b]\ncommand='x'\n", "server name"),
            ("[servers.a]\ncommand='x'\nheaders={A='b'}\n", "`headers` apply"),
            ("[servers.a]\ncommand='x'\nbogus=1\n", "unknown field"),
            ("[servers.a]\ncommand='x'\nenv={K={env='TOKEN',file='/f'}}\n", "exactly one of `env` and `file`"),
            ("[servers.a]\ncommand='x'\nenv={K={vault='x'}}\n", "unknown field `vault`"),
            (
                "[servers.a]\nurl='http://h/mcp'\nheaders={A={env='MISSING'}}\n",
                "`headers.A`: environment variable `MISSING`",
            ),
            ("[servers.a]\nurl='http://h/mcp'\nheaders={Accept='x'}\n", "set by the gateway"),
            (
                "[servers.a]\ncommand='x'\noauth={token_url='http://t',client_id='c',client_secret='s'}\n",
                "`oauth` applies",
            ),
            (
                "[servers.a]\nurl='http://h/mcp'\nheaders={Authorization='x'}\noauth={token_url='http://t',client_id='c',client_secret='s'}\n",
                "not both",
            ),
            (
                "[servers.a]\nurl='http://h/mcp'\noauth={token_url='ftp://t',client_id='c',client_secret='s'}\n",
                "oauth.token_url",
            ),
            (
                "[servers.a]\nurl='http://h/mcp'\noauth={token_url='http://t',client_id='c',client_secret='s',client_auth='jwt'}\n",
                "unknown variant",
            ),
        ];
        for (text, expected) in cases {
            let err = parse_file("f.toml", text, false, &env).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?} gave {err:?}, expected {expected:?}");
        }
    }

    #[test]
    fn server_flags() {
        let spec = parse_flag("every=npx -y @modelcontextprotocol/server-everything").unwrap();
        assert_eq!(
            spec.transport,
            Transport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "@modelcontextprotocol/server-everything".into()],
                env: BTreeMap::new(),
                cwd: None
            }
        );
        assert!(matches!(parse_flag("web=http://127.0.0.1:3001/mcp").unwrap().transport, Transport::Http { .. }));
        assert!(parse_flag("no-equals").is_err());
        assert!(parse_flag("x=").is_err());
        let dup = merge(vec![parse_flag("a=x").unwrap()], vec![parse_flag("a=y").unwrap()]);
        assert!(dup.unwrap_err().to_string().contains("already configured"));
    }
}
