//! Who is calling. Every API request carries an API key or a JWT bearer token; the tenant and
//! user come from the credential alone and reach the services as `x-tenant-id` /
//! `x-user-id`, with `x-switchyard-admin` for an administrator (see `clients::request`): a
//! caller's own identity headers are never read.
//! Open mode, for `switchyard dev`, lets requests without a credential through as the default
//! tenant.

pub mod jwt;
pub mod keys;

use std::sync::Arc;

use http::{HeaderMap, header};
use switchyard_kit::{TenantId, UserId};

use crate::error::ApiError;
pub use jwt::{JwtConfig, JwtVerifier};
pub use keys::{ApiKey, KeyStore, KeyStoreHealth, NewKey};
pub use switchyard_auth::KEY_PREFIX;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: TenantId,
    pub user: Option<UserId>,
    /// What rate limits count against: the key id, or the token's tenant and subject.
    pub principal: String,
    /// Administers its tenant: changes the tenant's roles and reads its users' sessions (and,
    /// in the `default` tenant, works on the trigger registry every tenant shares).
    pub admin: bool,
}

impl Caller {
    /// A caller in open mode: the default tenant, no user, one shared rate-limit bucket.
    pub fn open() -> Self {
        Self { tenant: TenantId::default_tenant(), user: None, principal: "open".to_owned(), admin: true }
    }
}

/// The credentials the edge accepts.
#[derive(Clone, Default)]
pub struct Authenticator {
    open: bool,
    keys: Option<Arc<KeyStore>>,
    jwt: Option<Arc<JwtVerifier>>,
}

impl Authenticator {
    pub fn new(open: bool, keys: Option<Arc<KeyStore>>, jwt: Option<Arc<JwtVerifier>>) -> Self {
        Self { open, keys, jwt }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn keys(&self) -> Option<&Arc<KeyStore>> {
        self.keys.as_ref()
    }

    /// Whether some callers are let in without the key table: token holders, or everyone in
    /// open mode.
    pub fn has_keyless_credentials(&self) -> bool {
        self.open || self.jwt.is_some()
    }

    /// What the edge accepts, for the start-up log.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.keys.is_some() {
            parts.push("API keys");
        }
        if self.jwt.is_some() {
            parts.push("JWT bearer tokens");
        }
        if self.open {
            parts.push("requests without a credential (open mode)");
        }
        parts.join(", ")
    }

    /// The caller of a request: from `Authorization: Bearer …` or `x-api-key`. In open mode a
    /// request without a credential passes; a credential the edge cannot check is ignored
    /// there (OpenAI clients always send some key).
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let Some(credential) = credential(headers)? else {
            return if self.open {
                Ok(Caller::open())
            } else {
                Err(ApiError::unauthenticated(
                    "missing credential: send `Authorization: Bearer <API key or token>` or `x-api-key`",
                ))
            };
        };
        if credential.starts_with(KEY_PREFIX) {
            if let Some(keys) = &self.keys {
                return keys.verify(credential).await.map(Caller::from).map_err(ApiError::from);
            }
        } else if credential.split('.').count() == 3
            && let Some(jwt) = &self.jwt
        {
            return jwt.verify(credential);
        }
        if self.open {
            Ok(Caller::open())
        } else {
            Err(ApiError::unauthenticated("unrecognised credential: expected a Switchyard API key or a JWT"))
        }
    }
}

/// The presented credential, if any.
fn credential(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value.to_str().map_err(|_| ApiError::unauthenticated("authorization: not valid text"))?;
        let (scheme, token) = text.split_once(' ').unwrap_or((text, ""));
        if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
            return Err(ApiError::unauthenticated("authorization: expected `Bearer <API key or token>`"));
        }
        return Ok(Some(token.trim()));
    }
    if let Some(value) = headers.get("x-api-key") {
        let text = value.to_str().map_err(|_| ApiError::unauthenticated("x-api-key: not valid text"))?;
        return Ok(Some(text.trim()).filter(|t| !t.is_empty()));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, value.parse().unwrap());
        headers
    }

    #[tokio::test]
    async fn closed_edges_want_a_credential_and_open_ones_do_not() {
        let closed = Authenticator::new(false, None, None);
        let err = closed.authenticate(&HeaderMap::new()).await.unwrap_err();
        assert_eq!(err.status(), 401);
        let err = closed.authenticate(&headers("authorization", "Basic abc")).await.unwrap_err();
        assert_eq!(err.status(), 401);
        let err = closed.authenticate(&headers("authorization", "Bearer sy_x_y")).await.unwrap_err();
        assert_eq!(err.status(), 401);

        let open = Authenticator::new(true, None, None);
        assert_eq!(open.authenticate(&HeaderMap::new()).await.unwrap(), Caller::open());
        // OpenAI SDKs send whatever key they were given.
        assert_eq!(open.authenticate(&headers("authorization", "Bearer sk-anything")).await.unwrap(), Caller::open());
        // Identity headers are never read.
        let caller = open.authenticate(&headers("x-tenant-id", "acme")).await.unwrap();
        assert_eq!(caller.tenant.as_str(), TenantId::DEFAULT);
    }
}
