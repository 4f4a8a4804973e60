//! JWT bearer tokens from an identity provider: HS256 with a shared secret, and RS256 with the
//! provider's public keys from a JWKS file (re-read when the file changes, so a Kubernetes
//! secret that rotates keys needs no restart). `exp` is required; `iss` and `aud` are checked
//! when configured. The tenant comes from a configurable claim, the user from `sub`; a token
//! grants administration with `"switchyard_admin": true` or the scope `switchyard:admin`.

use std::path::PathBuf;

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value};
use switchyard_auth::JwksFile;
use switchyard_kit::{Secret, TenantId, UserId};

use super::Caller;
use crate::error::ApiError;

/// The token settings, from the edge's flags.
#[derive(Debug, Clone, Default)]
pub struct JwtConfig {
    pub hs256_secret: Option<Secret>,
    pub jwks_file: Option<PathBuf>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// The claim naming the tenant.
    pub tenant_claim: String,
}

impl JwtConfig {
    pub fn is_configured(&self) -> bool {
        self.hs256_secret.is_some() || self.jwks_file.is_some()
    }
}

pub struct JwtVerifier {
    config: JwtConfig,
    hs256: Option<DecodingKey>,
    jwks: Option<JwksFile>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier").field("jwks_file", &self.config.jwks_file).finish_non_exhaustive()
    }
}

impl JwtVerifier {
    pub fn new(config: JwtConfig) -> anyhow::Result<Self> {
        let hs256 = config.hs256_secret.as_ref().map(|secret| DecodingKey::from_secret(secret.expose().as_bytes()));
        let jwks = match &config.jwks_file {
            Some(path) => Some(JwksFile::open(path)?),
            None => None,
        };
        anyhow::ensure!(!config.tenant_claim.is_empty(), "the tenant claim name must not be empty");
        Ok(Self { config, hs256, jwks })
    }

    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        let header = decode_header(token).map_err(|err| ApiError::unauthenticated(format!("invalid token: {err}")))?;
        let mut validation = Validation::new(header.alg);
        validation.set_required_spec_claims(&["exp"]);
        validation.leeway = 30;
        if let Some(issuer) = &self.config.issuer {
            validation.set_issuer(&[issuer]);
        }
        match &self.config.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        let claims = match header.alg {
            Algorithm::HS256 => {
                let key = self.hs256.as_ref().ok_or_else(|| unaccepted("HS256"))?;
                decode::<Map<String, Value>>(token, key, &validation)
            }
            Algorithm::RS256 => {
                let jwks = self.jwks.as_ref().ok_or_else(|| unaccepted("RS256"))?;
                let key = jwks
                    .key(header.kid.as_deref())
                    .ok_or_else(|| ApiError::unauthenticated("invalid token: no known key for its `kid`"))?;
                decode::<Map<String, Value>>(token, &key, &validation)
            }
            other => return Err(unaccepted(&format!("{other:?}"))),
        }
        .map_err(|err| ApiError::unauthenticated(format!("invalid token: {err}")))?
        .claims;
        self.caller(&claims)
    }

    fn caller(&self, claims: &Map<String, Value>) -> Result<Caller, ApiError> {
        let claim = &self.config.tenant_claim;
        let tenant = claims
            .get(claim)
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::forbidden(format!("the token has no `{claim}` claim naming a tenant")))?;
        let tenant = TenantId::parse(tenant)
            .map_err(|err| ApiError::forbidden(format!("token claim `{claim}`: {}", err.reason)))?;
        let user = claims
            .get("sub")
            .and_then(Value::as_str)
            .map(UserId::parse)
            .transpose()
            .map_err(|err| ApiError::forbidden(format!("token claim `sub`: {}", err.reason)))?;
        let admin = claims.get("switchyard_admin").and_then(Value::as_bool).unwrap_or(false)
            || claims
                .get("scope")
                .and_then(Value::as_str)
                .is_some_and(|scope| scope.split(' ').any(|s| s == "switchyard:admin"));
        let principal = format!("jwt:{}:{}", tenant, user.as_ref().map_or("", UserId::as_str));
        Ok(Caller { tenant, user, principal, admin })
    }
}

fn unaccepted(alg: &str) -> ApiError {
    ApiError::unauthenticated(format!("invalid token: {alg} tokens are not accepted here"))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    use super::*;

    fn verifier(issuer: Option<&str>) -> JwtVerifier {
        JwtVerifier::new(JwtConfig {
            hs256_secret: Some(Secret::new("a-long-shared-secret-for-tests")),
            issuer: issuer.map(str::to_owned),
            tenant_claim: "tenant".into(),
            ..Default::default()
        })
        .unwrap()
    }

    fn token(claims: Value, secret: &str) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    fn exp() -> u64 {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() + 600
    }

    #[test]
    fn hs256_tokens_name_tenant_user_and_admin() {
        let caller = verifier(None)
            .verify(&token(
                json!({"tenant": "acme", "sub": "ann", "exp": exp(), "scope": "read switchyard:admin"}),
                "a-long-shared-secret-for-tests",
            ))
            .unwrap();
        assert_eq!((caller.tenant.as_str(), caller.user.unwrap().as_str(), caller.admin), ("acme", "ann", true));
    }

    #[test]
    fn bad_tokens_are_refused_with_the_right_status() {
        let v = verifier(Some("https://idp.example"));
        let secret = "a-long-shared-secret-for-tests";
        // Wrong secret, expired, wrong issuer, no exp: 401.
        for claims in [
            token(json!({"tenant": "acme", "exp": exp(), "iss": "https://idp.example"}), "another-secret-entirely"),
            token(json!({"tenant": "acme", "exp": 1_000, "iss": "https://idp.example"}), secret),
            token(json!({"tenant": "acme", "exp": exp(), "iss": "https://evil.example"}), secret),
            token(json!({"tenant": "acme", "iss": "https://idp.example"}), secret),
        ] {
            assert_eq!(v.verify(&claims).unwrap_err().status(), 401);
        }
        // Valid but no tenant, or a malformed one: 403.
        let no_tenant = token(json!({"exp": exp(), "iss": "https://idp.example"}), secret);
        assert_eq!(v.verify(&no_tenant).unwrap_err().status(), 403);
        let bad_tenant = token(json!({"tenant": "a:b", "exp": exp(), "iss": "https://idp.example"}), secret);
        assert_eq!(v.verify(&bad_tenant).unwrap_err().status(), 403);
        // RS256 is not configured here.
        assert_eq!(v.verify("eyJhbGciOiJSUzI1NiJ9.e30.x").unwrap_err().status(), 401);
    }
}
