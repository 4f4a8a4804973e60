//! The audit trail (issue 31): every tool call through the gateway — who, tenant, server, tool,
//! a SHA-256 digest and the size of its arguments, its outcome and latency, and the arguments
//! themselves only when `--audit-arguments` is on, with the `--audit-redact` fields replaced.
//! Records travel with the usage records, off the request path through the kit's record
//! buffer, to Postgres (`tool_call_audit`) or memory; `ListToolCalls` reads them back by time
//! window and caller, a page at a time; records past `--audit-retention` are pruned hourly.

use base64::Engine;
use chrono::{DateTime, Utc};
use rmcp::model::JsonObject;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How a call ended, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The tool answered.
    Ok,
    /// The tool answered with `isError`.
    ToolError,
    /// The server failed the call (a protocol error, or the connection broke).
    Error,
    Timeout,
    /// The server was not connected (restarting, failed).
    Unavailable,
    /// A policy refused it: it never reached the server.
    Denied,
    /// Refused before it was sent (arguments over the limit).
    Invalid,
    /// No tool of that name.
    UnknownTool,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Self::Ok,
        Self::ToolError,
        Self::Error,
        Self::Timeout,
        Self::Unavailable,
        Self::Denied,
        Self::Invalid,
        Self::UnknownTool,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Denied => "denied",
            Self::Invalid => "invalid",
            Self::UnknownTool => "unknown_tool",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

/// One audited tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: uuid::Uuid,
    pub at: DateTime<Utc>,
    pub tenant: String,
    pub user: Option<String>,
    pub role: Option<String>,
    pub groups: Vec<String>,
    /// The MCP session or context handle (or the gRPC `session_id`).
    pub session_id: Option<String>,
    /// Empty for an unknown tool.
    pub server: String,
    /// The gateway name the caller used.
    pub tool: String,
    pub arguments_sha256: String,
    pub arguments_bytes: u64,
    /// Only with `--audit-arguments`, redacted.
    pub arguments: Option<Value>,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub duration_ms: u64,
    /// The policy that denied the call.
    pub policy: Option<String>,
}

/// What to keep of arguments.
#[derive(Debug, Clone, Default)]
pub struct AuditSettings {
    /// Keep the arguments themselves (`--audit-arguments`).
    pub arguments: bool,
    /// Field names whose values are replaced, lowercase (`--audit-redact`).
    pub redact: Vec<String>,
}

/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

impl AuditSettings {
    pub fn new(arguments: bool, redact: &[String]) -> Self {
        Self {
            arguments,
            redact: redact.iter().map(|f| f.trim().to_ascii_lowercase()).filter(|f| !f.is_empty()).collect(),
        }
    }

    /// The arguments as kept: None unless enabled; the redacted fields replaced at any depth.
    pub fn kept(&self, arguments: Option<&JsonObject>) -> Option<Value> {
        if !self.arguments {
            return None;
        }
        let mut value = Value::Object(arguments.cloned().unwrap_or_default());
        self.redact_in(&mut value);
        Some(value)
    }

    fn redact_in(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map.iter_mut() {
                    if self.redact.iter().any(|f| key.eq_ignore_ascii_case(f)) {
                        *inner = Value::String(REDACTED.to_owned());
                    } else {
                        self.redact_in(inner);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_in(item)),
            _ => {}
        }
    }
}

/// The hex SHA-256 and byte size of the arguments as compact JSON (`{}` without any): the same
/// arguments give the same digest, so calls can be matched without keeping what they carried.
pub fn digest(arguments: Option<&JsonObject>) -> (String, u64) {
    let bytes = match arguments {
        Some(arguments) => serde_json::to_vec(arguments).unwrap_or_default(),
        None => b"{}".to_vec(),
    };
    let hex = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    (hex, bytes.len() as u64)
}

/// Now, to the microsecond: what Postgres keeps, so a page token made from a record read back
/// from memory or from Postgres names the same instant.
pub fn now() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now)
}

/// Where a page starts: after this record in (time, id) order, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub at: DateTime<Utc>,
    pub id: uuid::Uuid,
}

impl Cursor {
    pub fn of(record: &AuditRecord) -> Self {
        Self { at: record.at, id: record.id }
    }

    pub fn token(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
            "{}/{}",
            self.at.timestamp_micros(),
            self.id.as_hyphenated()
        ))
    }

    pub fn parse(token: &str) -> Option<Self> {
        let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?;
        let text = String::from_utf8(text).ok()?;
        let (micros, id) = text.split_once('/')?;
        Some(Self { at: DateTime::from_timestamp_micros(micros.parse().ok()?)?, id: id.parse().ok()? })
    }
}

/// A `ListToolCalls` query, validated.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Inclusive.
    pub from: Option<DateTime<Utc>>,
    /// Exclusive.
    pub to: Option<DateTime<Utc>>,
    /// None: every tenant (administrators only).
    pub tenant: Option<String>,
    pub user: Option<String>,
    pub session_id: Option<String>,
    pub server: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<Outcome>,
    pub limit: usize,
    pub after: Option<Cursor>,
}

impl AuditQuery {
    /// Whether `record` is in this query's window and matches its filters (not the cursor).
    pub fn matches(&self, record: &AuditRecord) -> bool {
        let same = |wanted: &Option<String>, have: Option<&str>| wanted.as_deref().is_none_or(|w| have == Some(w));
        self.from.is_none_or(|from| record.at >= from)
            && self.to.is_none_or(|to| record.at < to)
            && same(&self.tenant, Some(&record.tenant))
            && same(&self.user, record.user.as_deref())
            && same(&self.session_id, record.session_id.as_deref())
            && same(&self.server, Some(&record.server))
            && same(&self.tool, Some(&record.tool))
            && self.outcome.is_none_or(|o| o == record.outcome)
    }

    /// Whether `record` comes after the cursor (newest first).
    pub fn after_cursor(&self, record: &AuditRecord) -> bool {
        self.after.is_none_or(|c| (record.at, record.id) < (c.at, c.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_of_compact_json() {
        let (hex, size) = digest(None);
        assert_eq!(hex, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
        assert_eq!(size, 2);
        let args: JsonObject = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert_eq!(digest(Some(&args)).1, br#"{"a":1}"#.len() as u64);
    }

    #[test]
    fn redaction_at_any_depth_without_case() {
        let settings = AuditSettings::new(true, &["Password".into(), "token".into()]);
        let args: JsonObject =
            serde_json::from_str(r#"{"user": "ada", "PASSWORD": "x", "nested": [{"token": 7, "keep": 1}]}"#).unwrap();
        let kept = settings.kept(Some(&args)).unwrap();
        assert_eq!(
            kept,
            serde_json::json!({"user": "ada", "PASSWORD": REDACTED, "nested": [{"token": REDACTED, "keep": 1}]})
        );
        assert_eq!(AuditSettings::new(false, &[]).kept(Some(&args)), None);
    }

    #[test]
    fn page_tokens_round_trip() {
        let cursor =
            Cursor { at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(), id: uuid::Uuid::new_v4() };
        assert_eq!(Cursor::parse(&cursor.token()), Some(cursor));
        assert_eq!(Cursor::parse("not a token"), None);
    }
}
