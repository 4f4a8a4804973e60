//! Which conversation a client-API request belongs to, decided once for every client API
//! (OpenAI chat completions, Anthropic messages, OpenAI responses). A request that names a
//! session continues it; a stateless caller, which resends the whole conversation each time,
//! gets a conversation key derived from what stays the same across its requests, so that its
//! role and model stick without it ever naming a session.

use http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::{auth::Caller, error::ApiError};

/// The header a caller may name its session in, instead of a body field.
pub const SESSION_HEADER: &str = "x-session-id";

/// What the router gets to find the conversation: a named session, or else a derived key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    pub session_id: String,
    pub conversation_key: String,
}

impl Conversation {
    /// The session named in the body (`body_session`, whose field is `field`) or in the
    /// `x-session-id` header; when neither names one, the key of the conversation that
    /// opens with `system` and `first_user` (see [`conversation_key`]).
    pub fn identify(
        caller: &Caller,
        headers: &HeaderMap,
        field: &str,
        body_session: Option<&str>,
        system: &str,
        first_user: &str,
    ) -> Result<Self, ApiError> {
        let header = headers
            .get(SESSION_HEADER)
            .map(|value| {
                value.to_str().map(str::trim).map_err(|_| {
                    ApiError::bad_request(SESSION_HEADER, "must be visible ASCII (a session id from Switchyard)")
                })
            })
            .transpose()?
            .filter(|value| !value.is_empty());
        let body = body_session.filter(|value| !value.is_empty());
        let session_id = match (body, header) {
            (Some(body), Some(header)) if body != header => {
                return Err(ApiError::bad_request(
                    field,
                    format!("names session `{body}` but the {SESSION_HEADER} header names `{header}`"),
                ));
            }
            (Some(named), _) | (None, Some(named)) => named,
            (None, None) => {
                return Ok(Self {
                    session_id: String::new(),
                    conversation_key: conversation_key(caller, system, first_user),
                });
            }
        };
        Ok(Self { session_id: session_id.to_owned(), conversation_key: String::new() })
    }
}

/// `conv-` and the SHA-256, in hex, of the caller's tenant, its user (empty for none), the
/// conversation's system prompt text and its first user message text, each length-prefixed
/// so no two different tuples give the same input. These are what a stateless client resends
/// unchanged with every request of one conversation; the user is part of it because a
/// session belongs to one user of a tenant. Two conversations that open with the same system
/// prompt and first message share a key, and so a role and model: that is the one thing this
/// rule cannot tell apart, and a caller that cares names a session.
pub fn conversation_key(caller: &Caller, system: &str, first_user: &str) -> String {
    let mut digest = Sha256::new();
    let user = caller.user.as_ref().map(|user| user.as_str()).unwrap_or_default();
    for part in [caller.tenant.as_str(), user, system, first_user] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    let hash = digest.finalize();
    let mut key = String::with_capacity(5 + 64);
    key.push_str("conv-");
    for byte in hash {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

#[cfg(test)]
mod tests {
    use switchyard_kit::identity::{TenantId, UserId};

    use super::*;

    fn caller(tenant: &str, user: Option<&str>) -> Caller {
        Caller {
            tenant: TenantId::parse(tenant).unwrap(),
            user: user.map(|u| UserId::parse(u).unwrap()),
            principal: "key".into(),
            admin: false,
        }
    }

    #[test]
    fn the_key_is_stable_and_separates_what_differs() {
        let acme = caller("acme", Some("ann"));
        let key = conversation_key(&acme, "Be brief.", "Fix my build");
        assert_eq!(key, conversation_key(&acme, "Be brief.", "Fix my build"));
        assert!(key.starts_with("conv-") && key.len() == 69, "{key}");
        assert_ne!(key, conversation_key(&acme, "Be brief.", "Fix my test"));
        assert_ne!(key, conversation_key(&acme, "Be long.", "Fix my build"));
        assert_ne!(key, conversation_key(&caller("acme", Some("bob")), "Be brief.", "Fix my build"));
        assert_ne!(key, conversation_key(&caller("globex", Some("ann")), "Be brief.", "Fix my build"));
        // Length prefixes: moving text from one part to the next is another conversation.
        assert_ne!(conversation_key(&acme, "ab", "c"), conversation_key(&acme, "a", "bc"));
    }

    #[test]
    fn a_named_session_wins_over_the_key() {
        let acme = caller("acme", None);
        let mut headers = HeaderMap::new();
        let derived = Conversation::identify(&acme, &headers, "session_id", None, "s", "u").unwrap();
        assert!(derived.session_id.is_empty());
        assert_eq!(derived.conversation_key, conversation_key(&acme, "s", "u"));
        let body = Conversation::identify(&acme, &headers, "session_id", Some("s-1"), "s", "u").unwrap();
        assert_eq!(body, Conversation { session_id: "s-1".into(), conversation_key: String::new() });
        headers.insert(SESSION_HEADER, "s-2".parse().unwrap());
        let header = Conversation::identify(&acme, &headers, "session_id", None, "s", "u").unwrap();
        assert_eq!(header.session_id, "s-2");
        let both = Conversation::identify(&acme, &headers, "session_id", Some("s-2"), "s", "u").unwrap();
        assert_eq!(both.session_id, "s-2");
        let err = Conversation::identify(&acme, &headers, "session_id", Some("s-1"), "s", "u").unwrap_err();
        assert_eq!(err.field(), Some("session_id"));
    }
}
