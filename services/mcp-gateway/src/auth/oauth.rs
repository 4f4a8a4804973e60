//! OAuth 2.1 bearer tokens per the MCP authorization spec: JWTs from one issuer, bound to this
//! resource (`aud`, RFC 8707), signed with a key of the issuer's JWKS (asymmetric algorithms
//! only: no `none`, no HMAC a public key could forge), and the protected resource metadata
//! (RFC 9728) that tells clients where to get them.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use arc_swap::ArcSwapOption;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use switchyard_auth::{JwksFile, KeySet};
use switchyard_kit::{RoleId, TenantId, UserId};

use super::config::AuthArgs;
use crate::policy::{MAX_GROUPS, Subject};

/// The algorithms accepted: every asymmetric one the verifier knows.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];
/// Least time between two fetches of a JWKS URL (a token naming an unknown `kid` asks for one).
const REFETCH_EVERY: Duration = Duration::from_secs(30);
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a verified token is taken on trust before its signature is checked again: a key
/// that leaves the issuer's JWKS stops its tokens within this time.
const VERIFIED_FOR: Duration = Duration::from_secs(60);
/// Most tokens remembered as verified (a few hundred bytes each).
const MAX_VERIFIED: usize = 10_000;

/// Tokens whose signature and claims were checked, by their SHA-256: a client sends the same
/// bearer with every request, and checking an RSA signature costs a tenth of a millisecond or
/// more. An entry holds the caller the token stands for and the key that signed it until the
/// token's `exp` or [`VERIFIED_FOR`], whichever comes first; only fully valid tokens are kept,
/// and one is taken on trust only while its key is still in the issuer's JWKS.
#[derive(Default)]
struct Verified {
    entries: Mutex<HashMap<[u8; 32], Remembered>>,
}

#[derive(Clone)]
struct Remembered {
    subject: Subject,
    kid: Option<String>,
    until: Instant,
}

impl Verified {
    fn digest(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    fn get(&self, digest: &[u8; 32]) -> Option<Remembered> {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.get(digest).filter(|entry| Instant::now() < entry.until).cloned()
    }

    /// Keeps `subject` for the token signed by `kid` until `exp` (seconds since the epoch) or
    /// VERIFIED_FOR.
    fn keep(&self, digest: [u8; 32], subject: &Subject, kid: Option<String>, exp: Option<u64>) {
        let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let Some(left) = exp.map(|exp| exp.saturating_sub(unix_now)).filter(|left| *left > 0) else { return };
        let until = Instant::now() + VERIFIED_FOR.min(Duration::from_secs(left));
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_VERIFIED {
            let now = Instant::now();
            entries.retain(|_, entry| entry.until > now);
            if entries.len() >= MAX_VERIFIED {
                entries.clear();
            }
        }
        entries.insert(digest, Remembered { subject: subject.clone(), kid, until });
    }
}

/// Why a token is refused: `invalid_token` (401) or `insufficient_scope` (403).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    Invalid(String),
    InsufficientScope { missing: Vec<String> },
}

/// Where the issuer's public keys come from.
enum Keys {
    File(JwksFile),
    Url(RemoteKeys),
}

/// A JWKS URL: fetched at start, again when a token names a key it lacks (rate-limited).
struct RemoteKeys {
    url: String,
    client: reqwest::Client,
    keys: ArcSwapOption<KeySet>,
    fetched: Mutex<Option<Instant>>,
    refetch: tokio::sync::Mutex<()>,
}

impl RemoteKeys {
    async fn key(&self, kid: Option<&str>) -> Option<DecodingKey> {
        if let Some(key) = self.keys.load().as_deref().and_then(|set| set.key(kid)) {
            return Some(key.clone());
        }
        // One fetch at a time, and not more often than REFETCH_EVERY: unknown kids are cheap
        // for an attacker to send.
        let _one = self.refetch.lock().await;
        if let Some(key) = self.keys.load().as_deref().and_then(|set| set.key(kid)) {
            return Some(key.clone());
        }
        let due = {
            let mut fetched = self.fetched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = fetched.is_none_or(|at| at.elapsed() >= REFETCH_EVERY);
            if due {
                *fetched = Some(Instant::now());
            }
            due
        };
        if due {
            match fetch_keys(&self.client, &self.url).await {
                Ok(set) => {
                    tracing::info!(url = %self.url, keys = set.len(), "fetched the issuer's JWKS");
                    self.keys.store(Some(std::sync::Arc::new(set)));
                }
                Err(err) => tracing::warn!(url = %self.url, error = %err, "fetching the issuer's JWKS failed"),
            }
        }
        self.keys.load().as_deref().and_then(|set| set.key(kid)).cloned()
    }
}

async fn fetch_json(client: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let response = client.get(url).timeout(FETCH_TIMEOUT).send().await?;
    anyhow::ensure!(response.status().is_success(), "{url} answered {}", response.status());
    Ok(response.json().await?)
}

async fn fetch_keys(client: &reqwest::Client, url: &str) -> anyhow::Result<KeySet> {
    KeySet::parse(&fetch_json(client, url).await?.to_string())
}

/// The `jwks_uri` of the issuer's metadata: RFC 8414's well-known path (inserted before the
/// issuer's path), then OpenID Connect discovery's.
async fn discover_jwks_uri(client: &reqwest::Client, issuer: &str) -> anyhow::Result<String> {
    let mut tried = Vec::new();
    for url in [
        well_known(issuer, "oauth-authorization-server"),
        format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
    ] {
        match fetch_json(client, &url).await {
            Ok(metadata) => {
                anyhow::ensure!(
                    metadata.get("issuer").and_then(Value::as_str) == Some(issuer),
                    "{url} names another issuer than --oauth-issuer {issuer}"
                );
                return metadata
                    .get("jwks_uri")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| anyhow::anyhow!("{url} has no jwks_uri"));
            }
            Err(err) => tried.push(format!("{url}: {err}")),
        }
    }
    anyhow::bail!("no metadata for issuer {issuer} ({})", tried.join("; "))
}

/// `scheme://authority/.well-known/<name><path>`: a well-known URL for an identifier with a
/// path, per RFC 8414 section 3 and RFC 9728 section 3.1.
pub fn well_known(identifier: &str, name: &str) -> String {
    let (origin, path) = match identifier.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
            (format!("{scheme}://{authority}"), path.trim_end_matches('/').to_owned())
        }
        None => (identifier.to_owned(), String::new()),
    };
    if path.is_empty() { format!("{origin}/.well-known/{name}") } else { format!("{origin}/.well-known/{name}/{path}") }
}

/// Checks bearer JWTs and turns their claims into the caller policies see.
pub struct TokenVerifier {
    issuer: String,
    audience: String,
    required_scopes: Vec<String>,
    tenant_claims: Vec<String>,
    leeway: u64,
    keys: Keys,
    verified: Verified,
    /// The protected resource metadata document, and where it is served.
    metadata: Value,
    metadata_url: String,
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl TokenVerifier {
    /// From validated flags; `policy_scopes` are the scopes policies select on (advertised).
    pub async fn new(args: &AuthArgs, policy_scopes: &[String]) -> anyhow::Result<Self> {
        let issuer = args.oauth_issuer.clone().ok_or_else(|| anyhow::anyhow!("--oauth-issuer is required"))?;
        let audience = args.oauth_audience.clone().ok_or_else(|| anyhow::anyhow!("--oauth-audience is required"))?;
        let keys = match (&args.oauth_jwks_file, &args.oauth_jwks_url) {
            (Some(path), _) => {
                Keys::File(JwksFile::open(path).map_err(|err| anyhow::anyhow!("--oauth-jwks-file: {err}"))?)
            }
            (None, url) => {
                let client = reqwest::Client::builder().build()?;
                let url = match url {
                    Some(url) => url.clone(),
                    None => discover_jwks_uri(&client, &issuer).await.map_err(|err| {
                        anyhow::anyhow!(
                            "discovering the JWKS of --oauth-issuer (or set --oauth-jwks-file/--oauth-jwks-url): {err}"
                        )
                    })?,
                };
                let set = fetch_keys(&client, &url)
                    .await
                    .map_err(|err| anyhow::anyhow!("fetching the JWKS at {url}: {err}"))?;
                Keys::Url(RemoteKeys {
                    url,
                    client,
                    keys: ArcSwapOption::from_pointee(set),
                    fetched: Mutex::new(Some(Instant::now())),
                    refetch: tokio::sync::Mutex::new(()),
                })
            }
        };
        let required_scopes = args.required_scopes();
        let mut scopes_supported = required_scopes.clone();
        scopes_supported.extend(policy_scopes.iter().cloned());
        scopes_supported.dedup();
        let metadata = json!({
            "resource": audience,
            "authorization_servers": [issuer],
            "scopes_supported": scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "Switchyard MCP gateway",
        });
        let metadata_url = well_known(&audience, "oauth-protected-resource");
        let tenant_claims =
            args.oauth_tenant_claim.iter().map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect();
        Ok(Self {
            issuer,
            audience,
            required_scopes,
            tenant_claims,
            leeway: args.oauth_leeway.as_secs(),
            keys,
            verified: Verified::default(),
            metadata,
            metadata_url,
        })
    }

    /// The protected resource metadata (RFC 9728).
    pub fn metadata(&self) -> &Value {
        &self.metadata
    }

    /// Where the metadata is served, for `WWW-Authenticate`'s `resource_metadata`.
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// The path of the metadata URL on this server (`/.well-known/oauth-protected-resource…`).
    pub fn metadata_path(&self) -> String {
        let after_scheme = self.metadata_url.split_once("://").map_or(self.metadata_url.as_str(), |(_, rest)| rest);
        after_scheme.find('/').map_or_else(|| "/".to_owned(), |at| after_scheme[at..].to_owned())
    }

    pub fn required_scopes(&self) -> &[String] {
        &self.required_scopes
    }

    /// The caller a token stands for, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Subject, TokenError> {
        let digest = Verified::digest(token);
        let remembered = match self.verified.get(&digest) {
            Some(entry) if self.key(entry.kid.as_deref()).await.is_some() => Some(entry.subject),
            _ => None,
        };
        let (subject, fresh) = match remembered {
            Some(subject) => (subject, None),
            None => {
                let (subject, kid, exp) = self.check(token).await?;
                (subject, Some((kid, exp)))
            }
        };
        let missing: Vec<String> =
            self.required_scopes.iter().filter(|s| !subject.scopes.contains(s)).cloned().collect();
        if !missing.is_empty() {
            return Err(TokenError::InsufficientScope { missing });
        }
        if let Some((kid, exp)) = fresh {
            self.verified.keep(digest, &subject, kid, exp);
        }
        Ok(subject)
    }

    /// The issuer's key named `kid`, as the keys are now.
    async fn key(&self, kid: Option<&str>) -> Option<DecodingKey> {
        match &self.keys {
            Keys::File(file) => file.key(kid),
            Keys::Url(remote) => remote.key(kid).await,
        }
    }

    /// The signature and claims of a token: the caller it stands for, its key and its `exp`.
    async fn check(&self, token: &str) -> Result<(Subject, Option<String>, Option<u64>), TokenError> {
        let invalid = |why: String| TokenError::Invalid(why);
        let header = decode_header(token).map_err(|err| invalid(format!("not a JWT: {err}")))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(invalid(format!("{:?} tokens are not accepted (asymmetric signatures only)", header.alg)));
        }
        let key = self
            .key(header.kid.as_deref())
            .await
            .ok_or_else(|| invalid("signed with a key the issuer's JWKS does not hold".into()))?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        let claims =
            decode::<Map<String, Value>>(token, &key, &validation).map_err(|err| invalid(describe(&err)))?.claims;
        let subject = self.subject(&claims).map_err(invalid)?;
        Ok((subject, header.kid, claims.get("exp").and_then(Value::as_u64)))
    }

    /// Claims to the caller: tenant (the first tenant claim present, else the default), user
    /// (`sub`), role (`role`), groups (`groups`), scopes (`scope`, space-separated, or `scp`).
    fn subject(&self, claims: &Map<String, Value>) -> Result<Subject, String> {
        let tenant = match self.tenant_claims.iter().find_map(|name| claims.get(name).map(|v| (name, v))) {
            None => TenantId::default_tenant(),
            Some((name, value)) => value
                .as_str()
                .ok_or_else(|| format!("claim `{name}` must be a string"))
                .and_then(|t| TenantId::parse(t).map_err(|err| format!("claim `{name}`: {}", err.reason)))?,
        };
        let user = match claims.get("sub") {
            None => None,
            Some(sub) => Some(sub.as_str().ok_or("claim `sub` must be a string").and_then(|s| {
                UserId::parse(s).map_err(|_| "claim `sub` must be 1 to 128 characters of [A-Za-z0-9._@:+-]")
            })?),
        };
        let role = match claims.get("role") {
            None => None,
            Some(role) => Some(
                role.as_str()
                    .ok_or_else(|| "claim `role` must be a string".to_owned())
                    .and_then(|r| RoleId::parse(r).map_err(|why| format!("claim `role`: {why}")))?,
            ),
        };
        let groups = strings(claims.get("groups"), "groups")?;
        if groups.len() > MAX_GROUPS {
            return Err(format!("claim `groups` names {} groups, over the limit of {MAX_GROUPS}", groups.len()));
        }
        let mut scopes = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(text)), _) => text.split_ascii_whitespace().map(str::to_owned).collect(),
            (Some(_), _) => return Err("claim `scope` must be a space-separated string".into()),
            (None, scp) => strings(scp, "scp")?,
        };
        scopes.sort();
        scopes.dedup();
        let mut subject = Subject { tenant, user, role, groups: Vec::new(), scopes };
        subject.set_groups(groups).map_err(|why| format!("claim `groups`: {why}"))?;
        Ok(subject)
    }
}

/// A claim that is a list of strings (or one string, space-separated).
fn strings(value: Option<&Value>, name: &str) -> Result<Vec<String>, String> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(text.split_ascii_whitespace().map(str::to_owned).collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(|| format!("claim `{name}` must hold strings")))
            .collect(),
        Some(_) => Err(format!("claim `{name}` must be a list of strings")),
    }
}

/// What was wrong with a token, said for its holder.
fn describe(err: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match err.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "the token is not for this resource (aud)".into(),
        ErrorKind::InvalidIssuer => "the token is from another issuer (iss)".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not fit its key".into(),
        _ => format!("invalid token: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_urls_keep_the_identifiers_path() {
        assert_eq!(
            well_known("https://mcp.example.com/mcp", "oauth-protected-resource"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            well_known("http://127.0.0.1:9/", "oauth-authorization-server"),
            "http://127.0.0.1:9/.well-known/oauth-authorization-server"
        );
        assert_eq!(
            well_known("https://idp.example/tenants/a", "oauth-authorization-server"),
            "https://idp.example/.well-known/oauth-authorization-server/tenants/a"
        );
    }

    #[test]
    fn a_verified_token_is_remembered_until_its_expiry_at_most_a_minute() {
        let verified = Verified::default();
        let subject = Subject { scopes: vec!["mcp:tools".into()], ..Subject::default() };
        let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let (live, expired, no_exp) =
            (Verified::digest("live"), Verified::digest("expired"), Verified::digest("no-exp"));
        verified.keep(live, &subject, Some("k1".into()), Some(unix_now + 3600));
        verified.keep(expired, &subject, Some("k1".into()), Some(unix_now.saturating_sub(1)));
        verified.keep(no_exp, &subject, Some("k1".into()), None);
        let entry = verified.get(&live).expect("remembered");
        assert_eq!((entry.subject.scopes, entry.kid.as_deref()), (vec!["mcp:tools".to_owned()], Some("k1")));
        assert!(verified.get(&expired).is_none(), "an expired token is never taken on trust");
        assert!(verified.get(&no_exp).is_none());
        let entries = verified.entries.lock().unwrap();
        assert!(entries[&live].until <= Instant::now() + VERIFIED_FOR, "at most VERIFIED_FOR, though it lives an hour");
    }

    #[test]
    fn the_verified_tokens_stay_bounded() {
        let verified = Verified::default();
        let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        for i in 0..=MAX_VERIFIED {
            verified.keep(Verified::digest(&i.to_string()), &Subject::default(), None, Some(unix_now + 600));
        }
        assert!(verified.entries.lock().unwrap().len() <= MAX_VERIFIED);
        assert!(verified.get(&Verified::digest(&MAX_VERIFIED.to_string())).is_some(), "the newest is kept");
    }

    #[test]
    fn claim_lists_take_arrays_or_spaced_strings() {
        assert_eq!(strings(Some(&json!(["a", "b"])), "groups").unwrap(), ["a", "b"]);
        assert_eq!(strings(Some(&json!("a b")), "scp").unwrap(), ["a", "b"]);
        assert!(strings(Some(&json!([1])), "groups").unwrap_err().contains("`groups`"));
        assert!(strings(None, "groups").unwrap().is_empty());
    }
}
