//! The console: one page, served from the binary (no build step, nothing fetched from the
//! web), that chats with streamed answers and charts the routing analytics.

use axum::{
    extract::Path,
    response::{IntoResponse, Response},
};
use http::{HeaderValue, StatusCode, header};

const INDEX: &str = include_str!("../console/index.html");
const APP_JS: &str = include_str!("../console/app.js");
const STYLE_CSS: &str = include_str!("../console/style.css");

pub async fn index() -> Response {
    file(INDEX, "text/html; charset=utf-8")
}

pub async fn asset(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "app.js" => file(APP_JS, "text/javascript; charset=utf-8"),
        "style.css" => file(STYLE_CSS, "text/css; charset=utf-8"),
        _ => crate::error::ApiError::not_found(format!("no console asset `{name}`")).into_response(),
    }
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // The page talks only to this origin and loads nothing from elsewhere.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'",
        ),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}
