//! API keys: the key table and its checks live in `switchyard-auth` (the MCP gateway accepts
//! the same keys); here a key's holder becomes the edge's caller, and a refusal its API error.

pub use switchyard_auth::keys::{ApiKey, KeyError, KeyHolder, KeyStore, KeyStoreHealth, NewKey};

use super::Caller;
use crate::error::ApiError;

impl From<KeyHolder> for Caller {
    fn from(holder: KeyHolder) -> Self {
        Self { tenant: holder.tenant, user: holder.user, principal: format!("key:{}", holder.id), admin: holder.admin }
    }
}

impl From<KeyError> for ApiError {
    fn from(err: KeyError) -> Self {
        match err {
            KeyError::Invalid => ApiError::unauthenticated(err.to_string()),
            // Logged once with the request id where the edge answers it (`error::log_failures`).
            KeyError::Unavailable => ApiError::unavailable(err.to_string()),
            KeyError::Malformed => ApiError::internal(err.to_string()),
        }
    }
}
