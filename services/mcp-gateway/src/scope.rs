//! Where a request's context lives.
//!
//! Up to protocol revision 2025-11-25 a context belongs to the MCP session (`Mcp-Session-Id`).
//! Revision 2026-07-28 has no sessions: every request stands alone. For it the gateway keys a
//! context by what that revision offers instead:
//!
//! - **a state handle** the gateway mints when `set_context` is called without one, returns in
//!   the result (`structuredContent.context` and `_meta["io.switchyard/context"]`), and accepts
//!   back in any request's `_meta["io.switchyard/context"]` — request metadata, like the
//!   protocol version every request of that revision carries, so the tools' schemas stay as the
//!   requirements define them (docs/requirements.md#mcp-set-context). Handles are random (122 bits), scoped to the tenant like every context,
//!   and expire with it;
//! - **the authenticated caller**, when a request carries no handle but the API gateway in
//!   front named the user (`x-user-id`): one context per user, for clients that cannot carry
//!   a handle.
//!
//! Neither exists for a stateless request without handle or user: it sees every tool, and
//! `set_context` mints a handle for it.

use rmcp::{ErrorData as McpError, model::RequestMetaObject};
use sha2::{Digest, Sha256};
use switchyard_kit::{Identity, SessionId};

use crate::store::SessionKey;

/// The `_meta` key (and result field) a context handle travels in.
pub const CONTEXT_META: &str = "io.switchyard/context";

/// What minted handles start with; nothing else is accepted as a handle, so a client cannot
/// name an MCP session or another user's caller key.
const HANDLE_PREFIX: &str = "ctx-";

/// The context a request reads and writes.
#[derive(Debug, Clone)]
pub enum ContextScope {
    /// A session-based client's MCP session.
    Session(SessionKey),
    /// A stateless request naming a handle the gateway minted.
    Handle(SessionKey),
    /// A stateless request from an authenticated user, without a handle.
    Caller(SessionKey),
    /// A stateless request with neither.
    None,
}

impl ContextScope {
    pub fn key(&self) -> Option<&SessionKey> {
        match self {
            Self::Session(key) | Self::Handle(key) | Self::Caller(key) => Some(key),
            Self::None => None,
        }
    }

    /// Whether the request came without an MCP session (revision 2026-07-28).
    pub fn is_stateless(&self) -> bool {
        !matches!(self, Self::Session(_))
    }

    /// The handle to give back to the client, when its context is keyed by one.
    pub fn handle(&self) -> Option<&str> {
        match self {
            Self::Handle(key) => Some(key.id.as_str()),
            _ => None,
        }
    }
}

/// A new handle for `identity`'s tenant.
pub fn mint(identity: &Identity) -> ContextScope {
    let id =
        SessionId::parse(&format!("{HANDLE_PREFIX}{}", uuid::Uuid::new_v4())).unwrap_or_else(|_| SessionId::generate());
    ContextScope::Handle(identity.session(id))
}

/// The scope of a stateless request: the handle in its `_meta`, else the caller.
pub fn stateless(identity: &Identity, meta: &RequestMetaObject) -> Result<ContextScope, McpError> {
    if let Some(value) = meta.get(CONTEXT_META) {
        let field = format!("_meta[\"{CONTEXT_META}\"]");
        return parse_handle(value, &field).map(|id| ContextScope::Handle(identity.session(id)));
    }
    Ok(match &identity.user {
        Some(user) => ContextScope::Caller(identity.session(caller_id(user.as_str()))),
        None => ContextScope::None,
    })
}

fn parse_handle(value: &serde_json::Value, field: &str) -> Result<SessionId, McpError> {
    let invalid = || {
        McpError::invalid_params(
            format!("{field} must be a context handle returned by set_context (`{HANDLE_PREFIX}…`)"),
            Some(serde_json::json!({"field": field})),
        )
    };
    let text = value.as_str().filter(|text| text.starts_with(HANDLE_PREFIX)).ok_or_else(invalid)?;
    SessionId::parse_field(text, field).map_err(|_| invalid())
}

/// A user's context key: a digest, as user ids may hold characters keys may not, and a key
/// never shows the user's name in the store.
fn caller_id(user: &str) -> SessionId {
    let digest = Sha256::digest(user.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    SessionId::parse(&format!("user:{hex}")).unwrap_or_else(|_| SessionId::generate())
}

/// The error for a handle the store no longer (or never) held.
pub fn unknown_handle(handle: &str) -> McpError {
    McpError::invalid_params(
        format!("context handle `{handle}` is unknown or expired: call set_context without one to get a new handle"),
        Some(serde_json::json!({"field": CONTEXT_META})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_kit::identity::{TenantId, UserId};

    fn identity(user: Option<&str>) -> Identity {
        Identity {
            tenant: TenantId::parse("acme").unwrap(),
            user: user.map(|u| UserId::parse(u).unwrap()),
            admin: false,
        }
    }

    fn meta(value: serde_json::Value) -> RequestMetaObject {
        let mut meta = RequestMetaObject::default();
        meta.insert(CONTEXT_META.to_owned(), value);
        meta
    }

    #[test]
    fn minted_handles_are_accepted_back_in_meta() {
        let ContextScope::Handle(key) = mint(&identity(None)) else { panic!("a handle") };
        let handle = serde_json::Value::String(key.id.as_str().to_owned());
        let scope = stateless(&identity(Some("alice")), &meta(handle)).unwrap();
        assert_eq!(scope.key().map(SessionKey::store_key), Some(key.store_key()), "the handle wins over the caller");
        assert_eq!(scope.handle(), Some(key.id.as_str()));
    }

    #[test]
    fn anything_else_is_refused_naming_the_field() {
        for bad in [serde_json::json!(7), serde_json::json!("user:abc"), serde_json::json!("ctx-has space")] {
            let err = stateless(&identity(None), &meta(bad.clone())).unwrap_err();
            assert!(err.message.contains(CONTEXT_META), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn without_a_handle_the_caller_or_nothing() {
        let none = RequestMetaObject::default();
        assert!(matches!(stateless(&identity(None), &none).unwrap(), ContextScope::None));
        let alice = stateless(&identity(Some("alice@example.com")), &none).unwrap();
        let bob = stateless(&identity(Some("bob@example.com")), &none).unwrap();
        assert!(matches!(alice, ContextScope::Caller(_)));
        assert_ne!(alice.key().unwrap().store_key(), bob.key().unwrap().store_key());
        assert!(!alice.key().unwrap().store_key().contains("alice"), "no user name in the store key");
        assert_eq!(alice.handle(), None, "a caller's context has no handle to give back");
    }
}
