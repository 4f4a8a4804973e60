//! Who a request is for: the tenant and user the edge authenticated, carried to every service
//! in gRPC metadata (`x-tenant-id`, `x-user-id`) and to the MCP front in HTTP headers. The
//! parse types are defined once here, and [`IdentityLayer`] reads and checks the headers for
//! every server in one place, so a tenant rule can never drift between services again.
//!
//! A session, its history and its MCP context belong to one tenant: [`SessionKey`] joins the
//! two, and store keys built from it never let two tenants meet (neither part may contain the
//! other's separator rules: tenants have no `:`).

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::{HeaderMap, Request, Response};
use tower::{Layer, Service};

use crate::error::{ErrorCode, ServiceError};

/// The metadata key (and HTTP header) carrying the caller's tenant.
pub const TENANT_HEADER: &str = "x-tenant-id";
/// The metadata key (and HTTP header) carrying the caller's user.
pub const USER_HEADER: &str = "x-user-id";
/// The metadata key saying the caller is an administrator of its tenant (`true`). Only the
/// edge sets it, from the credential it checked; requests it makes never carry a client's.
pub const ADMIN_HEADER: &str = "x-switchyard-admin";

/// A request field (or header) that failed validation, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }
}

impl ServiceError for FieldError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }

    fn field(&self) -> Option<&str> {
        Some(&self.field)
    }
}

fn chars_in(text: &str, max: usize, extra: &[char]) -> bool {
    !text.is_empty() && text.len() <= max && text.chars().all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
}

/// A tenant: 1 to 64 characters of `[A-Za-z0-9._-]` — no `:`, which joins tenant and session
/// in store keys, so two tenants' sessions can never share a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(String);

impl TenantId {
    pub const DEFAULT: &'static str = "default";
    pub const MAX_LEN: usize = 64;

    pub fn parse(text: &str) -> Result<Self, FieldError> {
        if chars_in(text, Self::MAX_LEN, &['.', '_', '-']) {
            Ok(Self(text.to_owned()))
        } else {
            Err(FieldError::new(TENANT_HEADER, format!("`{text}` must be 1 to 64 characters of [A-Za-z0-9._-]")))
        }
    }

    /// The tenant of internal callers that send none.
    pub fn default_tenant() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A user within a tenant: 1 to 128 characters of `[A-Za-z0-9._@:+-]` (ids, emails, `sub`s).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(String);

impl UserId {
    pub const MAX_LEN: usize = 128;

    pub fn parse(text: &str) -> Result<Self, FieldError> {
        if chars_in(text, Self::MAX_LEN, &['.', '_', '@', ':', '+', '-']) {
            Ok(Self(text.to_owned()))
        } else {
            Err(FieldError::new(USER_HEADER, format!("`{text}` must be 1 to 128 characters of [A-Za-z0-9._@:+-]")))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A session id: caller-chosen or a generated UUID; 1 to 128 characters of `[A-Za-z0-9._:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    pub const MAX_LEN: usize = 128;

    /// Errors name the field `session_id`; use [`SessionId::parse_field`] for another name.
    pub fn parse(text: &str) -> Result<Self, FieldError> {
        Self::parse_field(text, "session_id")
    }

    pub fn parse_field(text: &str, field: &str) -> Result<Self, FieldError> {
        if text.is_empty() {
            return Err(FieldError::new(field, "must not be empty"));
        }
        if chars_in(text, Self::MAX_LEN, &['.', '_', ':', '-']) {
            Ok(Self(text.to_owned()))
        } else {
            Err(FieldError::new(field, format!("must be 1 to {} characters of [A-Za-z0-9._:-]", Self::MAX_LEN)))
        }
    }

    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a session lives: its tenant and id. Another tenant's key never finds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub tenant: TenantId,
    pub id: SessionId,
}

impl SessionKey {
    pub fn new(tenant: TenantId, id: SessionId) -> Self {
        Self { tenant, id }
    }

    /// `<tenant>:<id>`: unambiguous, because a tenant has no `:`.
    pub fn store_key(&self) -> String {
        format!("{}:{}", self.tenant, self.id)
    }
}

/// The caller a request is for, as the edge authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub tenant: TenantId,
    pub user: Option<UserId>,
    /// An administrator of the tenant: may read every user's sessions.
    pub admin: bool,
}

impl Identity {
    /// Reads `x-tenant-id` (the default tenant when absent), `x-user-id` (optional) and
    /// `x-switchyard-admin` (`true` or `false`; absent is `false`).
    pub fn from_headers(headers: &HeaderMap) -> Result<Self, FieldError> {
        let tenant = match header(headers, TENANT_HEADER)? {
            None => TenantId::default_tenant(),
            Some(text) => TenantId::parse(text)?,
        };
        let user = header(headers, USER_HEADER)?.map(UserId::parse).transpose()?;
        let admin = match header(headers, ADMIN_HEADER)? {
            None => false,
            Some(text) if text.eq_ignore_ascii_case("true") => true,
            Some(text) if text.eq_ignore_ascii_case("false") => false,
            Some(_) => return Err(FieldError::new(ADMIN_HEADER, "must be `true` or `false`")),
        };
        Ok(Self { tenant, user, admin })
    }

    /// The operator: an administrator of the default tenant, the one caller that may act on
    /// other tenants (their budgets, their audit records). A tenant's own administrator is not:
    /// the edge lets every tenant have administrators.
    pub fn is_operator(&self) -> bool {
        self.admin && self.tenant == TenantId::default_tenant()
    }

    /// Whether this caller may see what `owner` made: the owner, an administrator of the
    /// tenant, or any caller when there is no owner (made by an internal caller without a
    /// user). An internal caller without a user sees all of its tenant's.
    pub fn may_read(&self, owner: Option<&UserId>) -> bool {
        self.admin || self.may_change(owner)
    }

    /// Whether this caller may use or change what `owner` made: the owner, or any caller
    /// when either side has no user.
    pub fn may_change(&self, owner: Option<&UserId>) -> bool {
        match (owner, &self.user) {
            (Some(owner), Some(user)) => owner == user,
            _ => true,
        }
    }

    /// The identity [`IdentityLayer`] put in a request's extensions. A request that did not
    /// pass through the layer (a stdio MCP client: the local process itself) is the default
    /// tenant's.
    pub fn from_extensions(extensions: &http::Extensions) -> Self {
        extensions.get::<Self>().cloned().unwrap_or_default()
    }

    /// The identity of a gRPC request (see [`Identity::from_extensions`]).
    pub fn of<T>(request: &tonic::Request<T>) -> Self {
        Self::from_extensions(request.extensions())
    }

    /// The session `id` of this caller's tenant.
    pub fn session(&self, id: SessionId) -> SessionKey {
        SessionKey::new(self.tenant.clone(), id)
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, FieldError> {
    headers
        .get(name)
        .map(|value| value.to_str().map_err(|_| FieldError::new(name, "must be visible ASCII")))
        .transpose()
}

/// How a front answers a request whose identity headers are invalid.
pub trait Reject<ResBody>: Clone + Send + Sync + 'static {
    fn reject(&self, err: &FieldError) -> Response<ResBody>;
}

/// gRPC: `INVALID_ARGUMENT` naming the header, with a `google.rpc.BadRequest` detail.
#[derive(Debug, Clone, Copy)]
pub struct GrpcReject;

impl<ResBody: Default> Reject<ResBody> for GrpcReject {
    fn reject(&self, err: &FieldError) -> Response<ResBody> {
        crate::error::to_status(err).into_http()
    }
}

/// Plain HTTP (the MCP front): `400 Bad Request` with a JSON body naming the header.
#[derive(Debug, Clone, Copy)]
pub struct HttpReject;

impl<ResBody: From<String>> Reject<ResBody> for HttpReject {
    fn reject(&self, err: &FieldError) -> Response<ResBody> {
        let body = serde_json::json!({ "error": { "field": err.field, "message": err.to_string() } }).to_string();
        let mut response = Response::new(ResBody::from(body));
        *response.status_mut() = http::StatusCode::BAD_REQUEST;
        response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        response
    }
}

/// Reads and checks the identity headers of every request, puts the [`Identity`] in the
/// request's extensions, and answers an invalid header at once (the service never runs).
#[derive(Debug, Clone, Copy)]
pub struct IdentityLayer<R> {
    reject: R,
}

impl IdentityLayer<GrpcReject> {
    pub fn grpc() -> Self {
        Self { reject: GrpcReject }
    }
}

impl IdentityLayer<HttpReject> {
    pub fn http() -> Self {
        Self { reject: HttpReject }
    }
}

impl<S, R: Clone> Layer<S> for IdentityLayer<R> {
    type Service = IdentityService<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        IdentityService { inner, reject: self.reject.clone() }
    }
}

#[derive(Debug, Clone)]
pub struct IdentityService<S, R> {
    inner: S,
    reject: R,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R, B, ResBody> Service<Request<B>> for IdentityService<S, R>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    R: Reject<ResBody>,
    ResBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match Identity::from_headers(request.headers()) {
            Ok(identity) => {
                request.extensions_mut().insert(identity);
                Box::pin(self.inner.call(request))
            }
            Err(err) => {
                tracing::debug!(field = %err.field, reason = %err.reason, "rejected identity headers");
                let response = self.reject.reject(&err);
                Box::pin(async move { Ok(response) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("header value"));
        }
        map
    }

    #[test]
    fn absent_headers_mean_the_default_tenant_and_no_user() {
        let identity = Identity::from_headers(&HeaderMap::new()).expect("identity");
        assert_eq!(identity.tenant.as_str(), "default");
        assert_eq!(identity.user, None);
    }

    #[test]
    fn both_headers_are_read_and_checked() {
        let identity = Identity::from_headers(&headers(&[(TENANT_HEADER, "acme"), (USER_HEADER, "ada@acme.io")]))
            .expect("identity");
        assert_eq!(identity.tenant.as_str(), "acme");
        assert_eq!(identity.user.as_ref().map(UserId::as_str), Some("ada@acme.io"));

        let err = Identity::from_headers(&headers(&[(TENANT_HEADER, "a:b")])).expect_err("colon");
        assert_eq!(err.field, TENANT_HEADER);
        let err = Identity::from_headers(&headers(&[(USER_HEADER, "two words")])).expect_err("space");
        assert_eq!(err.field, USER_HEADER);
    }

    #[test]
    fn the_admin_flag_is_true_or_false_and_absent_means_false() {
        assert!(!Identity::from_headers(&HeaderMap::new()).expect("identity").admin);
        assert!(Identity::from_headers(&headers(&[(ADMIN_HEADER, "true")])).expect("identity").admin);
        assert!(!Identity::from_headers(&headers(&[(ADMIN_HEADER, "False")])).expect("identity").admin);
        let err = Identity::from_headers(&headers(&[(ADMIN_HEADER, "yes")])).expect_err("not a boolean");
        assert_eq!(err.field, ADMIN_HEADER);
    }

    #[test]
    fn what_a_user_made_is_theirs_and_their_administrators() {
        let user = |name: &str| Some(UserId::parse(name).expect("user"));
        let ann = Identity { user: user("ann"), ..Identity::default() };
        let bob = Identity { user: user("bob"), ..Identity::default() };
        let admin = Identity { user: user("root"), admin: true, ..Identity::default() };
        let internal = Identity::default();
        let anns = user("ann");
        assert!(ann.may_read(anns.as_ref()) && ann.may_change(anns.as_ref()));
        assert!(!bob.may_read(anns.as_ref()) && !bob.may_change(anns.as_ref()));
        assert!(admin.may_read(anns.as_ref()) && !admin.may_change(anns.as_ref()));
        assert!(internal.may_read(anns.as_ref()) && internal.may_change(anns.as_ref()));
        assert!(bob.may_read(None) && bob.may_change(None), "an internal caller's is the tenant's");
    }

    #[test]
    fn tenants_never_contain_the_key_separator() {
        // `a:b` + `c` and `a` + `b:c` would otherwise share the store key `a:b:c`.
        assert!(TenantId::parse("a:b").is_err());
        assert!(TenantId::parse("").is_err());
        assert!(TenantId::parse(&"t".repeat(65)).is_err());
        assert!(TenantId::parse("acme-eu.prod_1").is_ok());
        let key = Identity::default().session(SessionId::parse("b:c").expect("id"));
        assert_eq!(key.store_key(), "default:b:c");
    }

    #[test]
    fn session_ids_name_their_field() {
        assert_eq!(SessionId::parse("").expect_err("empty").field, "session_id");
        assert_eq!(SessionId::parse_field("x y", "id").expect_err("space").field, "id");
        assert!(SessionId::parse(&"s".repeat(129)).is_err());
        assert!(SessionId::parse("demo-1:a.b_c").is_ok());
    }

    #[tokio::test]
    async fn the_grpc_layer_rejects_bad_tenants_before_the_service_and_passes_identity_on() {
        use tower::ServiceExt;
        let service = IdentityLayer::grpc().layer(tower::service_fn(|request: Request<()>| async move {
            let identity = Identity::from_extensions(request.extensions());
            Ok::<_, std::convert::Infallible>(Response::new(identity.tenant.to_string()))
        }));
        let ok = Request::builder().header(TENANT_HEADER, "acme").body(()).expect("request");
        let response = service.clone().oneshot(ok).await.expect("response");
        assert_eq!(response.body(), "acme");

        let bad = Request::builder().header(TENANT_HEADER, "no spaces").body(()).expect("request");
        let response = service.oneshot(bad).await.expect("response");
        assert_eq!(response.headers().get("grpc-status").map(|v| v.as_bytes()), Some(&b"3"[..]));
        assert_eq!(response.body(), "", "the service never ran");
    }

    #[tokio::test]
    async fn the_http_layer_answers_400_with_json_naming_the_header() {
        use tower::ServiceExt;
        let service = IdentityLayer::http().layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
        let bad = Request::builder().header(USER_HEADER, "bad user").body(()).expect("request");
        let response = service.oneshot(bad).await.expect("response");
        assert_eq!(response.status(), http::StatusCode::BAD_REQUEST);
        let body: serde_json::Value = serde_json::from_str(response.body()).expect("json");
        assert_eq!(body["error"]["field"], USER_HEADER);
    }
}
