//! What `/mcp` checks before the MCP transport sees a request: the browser's `Origin`, which
//! the streamable HTTP transport requires servers to validate against DNS rebinding (a page
//! on another site must not drive a gateway it can reach), and a body that is not one JSON-RPC
//! message, answered with a JSON-RPC error (`-32700`, `-32600`, `-32602`) and 400 instead of
//! the transport's plain-text 415. Both answers carry a JSON-RPC error with a null `id`.

use std::sync::Arc;

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::{Value, json};
use switchyard_kit::http_server::{BodyError, read_body};

/// JSON-RPC 2.0's error codes for input that is not a request.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// An allowed origin: scheme and host, and a port (`None`: any port).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// `scheme://host[:port]` as a browser sends it (no path); `:*` stands for any port.
    fn parse(text: &str) -> Result<Self, String> {
        let (base, any_port) = match text.strip_suffix(":*") {
            Some(base) => (base, true),
            None => (text, false),
        };
        let uri: http::Uri = base.parse().map_err(|err| format!("`{text}` is not an origin: {err}"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(format!("`{text}` is not an origin: expected scheme://host[:port]"));
        };
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") || base.ends_with('/') {
            return Err(format!("`{text}` is not an origin: it has a path"));
        }
        if authority.as_str().contains('@') {
            return Err(format!("`{text}` is not an origin: it has user information"));
        }
        let scheme = scheme.to_ascii_lowercase();
        let port = match (any_port, authority.port_u16()) {
            (true, Some(_)) => return Err(format!("`{text}` is not an origin: two ports")),
            (true, None) => None,
            (false, Some(port)) => Some(port),
            (false, None) => Some(default_port(&scheme)),
        };
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        Ok(Self { scheme, host, port })
    }

    fn admits(&self, origin: &Origin) -> bool {
        self.scheme == origin.scheme && self.host == origin.host && self.port.is_none_or(|p| Some(p) == origin.port)
    }
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

/// Checks a `--allowed-origin` value (clap's value parser): `*`, or an origin.
pub fn parse_allowed_origin(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text != "*" {
        Origin::parse(text)?;
    }
    Ok(text.to_owned())
}

/// The origins `/mcp` accepts: loopback pages on any port (a developer's own tools, the
/// console of `switchyard dev`), and the configured ones.
#[derive(Debug, Clone)]
pub struct Origins {
    any: bool,
    allowed: Vec<Origin>,
}

impl Origins {
    /// From `--allowed-origin` values (checked by [`parse_allowed_origin`]; a value that does
    /// not parse is skipped). `*` turns the check off.
    pub fn new(configured: &[String]) -> Self {
        let any = configured.iter().any(|o| o.trim() == "*");
        let mut allowed: Vec<Origin> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .flat_map(|host| {
                ["http", "https"].map(|scheme| Origin {
                    scheme: scheme.to_owned(),
                    host: (*host).to_owned(),
                    port: None,
                })
            })
            .collect();
        allowed.extend(configured.iter().filter_map(|o| Origin::parse(o.trim()).ok()));
        Self { any, allowed }
    }

    pub fn accepts_any(&self) -> bool {
        self.any
    }

    /// Whether a request may go on: no `Origin` (not a browser), or an allowed one.
    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::ORIGIN) else { return true };
        if self.any {
            return true;
        }
        let Some(origin) = value.to_str().ok().and_then(|text| Origin::parse(text).ok()) else {
            // `null` (a sandboxed page, a file) and anything unreadable: no site to trust.
            return false;
        };
        self.allowed.iter().any(|allowed| allowed.admits(&origin))
    }
}

/// The checks as axum middleware over the transport.
#[derive(Debug, Clone)]
pub struct Guard {
    pub origins: Origins,
    /// The largest body the transport takes (it answers 413 beyond; so does the guard).
    pub max_body_bytes: usize,
}

/// A JSON-RPC error response with a null `id`, as JSON.
fn jsonrpc_error(status: StatusCode, code: i64, message: impl Into<String>, id: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if !guard.origins.admits(request.headers()) {
        let origin = request.headers().get(header::ORIGIN).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        tracing::warn!(origin = origin.as_deref().unwrap_or(""), "mcp request refused: origin not allowed");
        return jsonrpc_error(
            StatusCode::FORBIDDEN,
            INVALID_REQUEST,
            format!("Origin `{}` is not allowed (add it with --allowed-origin)", origin.as_deref().unwrap_or_default()),
            Value::Null,
        );
    }
    // The caller's role and groups (the policies' subject): a malformed header is the
    // client's mistake, named, before anything is served.
    if let Err(err) = crate::policy::Subject::from_headers(&switchyard_kit::Identity::default(), request.headers()) {
        return jsonrpc_error(StatusCode::BAD_REQUEST, INVALID_REQUEST, err.to_string(), json!({"field": err.field}));
    }
    if request.method() != Method::POST || !is_json(request.headers()) {
        // Other methods, and a wrong Content-Type (the transport's 415), are the transport's.
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let announced = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let bytes = match read_body(body, guard.max_body_bytes, announced).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return jsonrpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                INVALID_REQUEST,
                format!("request body exceeds {} bytes", guard.max_body_bytes),
                Value::Null,
            );
        }
        Err(BodyError::Unreadable(err)) => {
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                format!("request body could not be read: {err}"),
                Value::Null,
            );
        }
    };
    // The transport's parser stops at its own depth limit with a parse error naming nothing:
    // name the member instead (in `params`, the caller's arguments, say).
    if let Some(path) = switchyard_kit::json_depth::too_deep(&bytes, switchyard_kit::json_depth::MAX_DEPTH) {
        let code = if path.starts_with("params") { INVALID_PARAMS } else { INVALID_REQUEST };
        let name = if path.is_empty() { "the message".to_owned() } else { format!("`{path}`") };
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            code,
            format!("{name} nests deeper than {} levels", switchyard_kit::json_depth::MAX_DEPTH),
            Value::Null,
        );
    }
    let response = next.run(Request::from_parts(parts, Body::from(bytes.clone()))).await;
    // With a JSON Content-Type, the transport's 415 means the body is not a message it reads:
    // only then is the body looked at again, so a good request is parsed once.
    if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return malformed(&bytes);
    }
    response
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json"))
}

/// Why a body is not one JSON-RPC message, as JSON-RPC says it.
fn malformed(body: &Bytes) -> Response {
    let (code, message, id) = classify(body);
    jsonrpc_error(StatusCode::BAD_REQUEST, code, message, id)
}

fn classify(body: &[u8]) -> (i64, String, Value) {
    let value = match serde_json::from_slice::<Value>(body) {
        Ok(value) => value,
        Err(err) => return (PARSE_ERROR, format!("Parse error: {err}"), Value::Null),
    };
    let object = match value {
        Value::Array(items) if items.is_empty() => {
            return (INVALID_REQUEST, "Invalid Request: an empty batch".to_owned(), Value::Null);
        }
        Value::Array(_) => {
            return (
                INVALID_REQUEST,
                "Invalid Request: batches are not accepted; send one JSON-RPC message per request".to_owned(),
                Value::Null,
            );
        }
        Value::Object(object) => object,
        _ => return (INVALID_REQUEST, "Invalid Request: not a JSON-RPC object".to_owned(), Value::Null),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return (INVALID_REQUEST, "Invalid Request: `jsonrpc` must be \"2.0\"".to_owned(), Value::Null);
    }
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        let what = "Invalid Request: neither a request, a notification nor a response";
        return (INVALID_REQUEST, what.to_owned(), Value::Null);
    };
    // A request or notification of a known method whose params do not fit it.
    let id = match object.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    let reason = match serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body) {
        Err(err) => err.to_string(),
        Ok(_) => "not accepted".to_owned(),
    };
    (INVALID_PARAMS, format!("Invalid params for `{method}`: {reason}"), id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(origin: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers
    }

    #[test]
    fn loopback_origins_of_any_port_pass_and_others_do_not() {
        let origins = Origins::new(&[]);
        assert!(origins.admits(&HeaderMap::new()), "no Origin: not a browser");
        for allowed in ["http://localhost:3000", "http://127.0.0.1", "https://[::1]:8443", "http://LOCALHOST:1"] {
            assert!(origins.admits(&headers(allowed)), "{allowed}");
        }
        for refused in ["http://evil.example", "null", "http://localhost.evil.example", "http://127.0.0.2:80"] {
            assert!(!origins.admits(&headers(refused)), "{refused}");
        }
    }

    #[test]
    fn configured_origins_match_scheme_host_and_port() {
        let origins = Origins::new(&["https://app.example.com".into(), "http://tools.example:*".into()]);
        assert!(origins.admits(&headers("https://app.example.com")));
        assert!(origins.admits(&headers("https://app.example.com:443")));
        assert!(!origins.admits(&headers("https://app.example.com:8443")), "no port means the default one");
        assert!(!origins.admits(&headers("http://app.example.com")), "scheme matters");
        assert!(origins.admits(&headers("http://tools.example:9000")));
        assert!(Origins::new(&["*".into()]).admits(&headers("http://evil.example")));
    }

    #[test]
    fn allowed_origins_are_checked_when_configured() {
        assert_eq!(parse_allowed_origin(" https://a.example:8443 ").unwrap(), "https://a.example:8443");
        assert!(parse_allowed_origin("*").is_ok());
        for bad in ["a.example", "https://a.example/path", "https://a.example:1:*", "https://u@a.example"] {
            assert!(parse_allowed_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn malformed_bodies_get_the_json_rpc_code_for_what_is_wrong() {
        assert_eq!(classify(b"{\"jsonrpc\":\"2.0\",").0, PARSE_ERROR);
        assert_eq!(classify(b"[]").0, INVALID_REQUEST);
        assert_eq!(classify(b"{\"a\":1}").0, INVALID_REQUEST);
        assert_eq!(classify(b"42").0, INVALID_REQUEST);
        let (code, message, id) = classify(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":3}}"#);
        assert_eq!((code, id), (INVALID_PARAMS, json!(7)), "{message}");
    }
}
