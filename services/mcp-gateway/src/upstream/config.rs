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
//! environment variable, so secrets stay in Kubernetes Secrets rather than the file.

use std::{collections::BTreeMap, path::Path};

use serde::Deserialize;

/// Longest server name: it prefixes every tool name, and a tool name is at most 64 characters.
pub const MAX_SERVER_NAME: usize = 24;

/// How the gateway reaches one upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String>, cwd: Option<String> },
    /// A streamable HTTP endpoint.
    Http { url: String, headers: BTreeMap<String, String> },
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
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Accepted for compatibility with desktop-client files (`"stdio"`, `"http"`,
    /// `"streamable-http"`); the transport follows from `command` or `url`.
    #[serde(default, rename = "type")]
    kind: Option<String>,
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
                    let env = server
                        .env
                        .into_iter()
                        .map(|(key, value)| Ok((key, expand(&at, &value, lookup)?)))
                        .collect::<Result<_, ConfigError>>()?;
                    Transport::Stdio { command, args: server.args, env, cwd: server.cwd }
                }
                (None, Some(url)) => {
                    if !server.args.is_empty() || !server.env.is_empty() || server.cwd.is_some() {
                        return Err(invalid(&at, "`args`, `env` and `cwd` apply to `command` servers only"));
                    }
                    check_kind(&at, server.kind.as_deref(), "http")?;
                    let url = expand(&at, &url, lookup)?;
                    check_url(&at, &url)?;
                    let headers = server
                        .headers
                        .into_iter()
                        .map(|(key, value)| {
                            http::HeaderName::try_from(key.as_str())
                                .map_err(|_| invalid(&at, format!("header name `{key}` is not valid")))?;
                            let value = expand(&at, &value, lookup)?;
                            http::HeaderValue::try_from(value.as_str())
                                .map_err(|_| invalid(&at, format!("header `{key}` has a value that is not valid")))?;
                            Ok((key, value))
                        })
                        .collect::<Result<_, ConfigError>>()?;
                    Transport::Http { url, headers }
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
        Transport::Http { url: target.to_owned(), headers: BTreeMap::new() }
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

/// Replaces `${VAR}` with the variable's value; an unset variable is an error, not "".
fn expand(origin: &str, value: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| invalid(origin, "unterminated `${` in a value"))?;
        let name = &after[..end];
        let resolved =
            lookup(name).ok_or_else(|| invalid(origin, format!("environment variable `{name}` is not set")))?;
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
        assert!(matches!(&specs[0].transport, Transport::Stdio { env, .. } if env["KEY"] == "s3cret"));
        assert!(
            matches!(&specs[1].transport, Transport::Http { headers, .. } if headers["Authorization"] == "Bearer s3cret")
        );
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
