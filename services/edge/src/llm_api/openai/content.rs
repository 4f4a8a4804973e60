//! A chat message's content: text, and a user's text and images.

use serde_json::{Map, Value};
use switchyard_proto::router::v1::{self as router, content_part};

use crate::{
    error::ApiError,
    llm_api::content::{image_detail, part_kind, part_text},
};

/// Content that can only be text: a string, or text parts (joined by newlines).
pub(super) fn text_content(content: Option<&Value>, field: &str) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(index, part)| match part_kind(part, &format!("{field}[{index}]"))? {
                ("text", part) => part_text(part, &format!("{field}[{index}].text")),
                (kind, _) => Err(ApiError::bad_request(
                    format!("{field}[{index}].type"),
                    format!("content parts of type `{kind}` are not supported here; send text"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.join("\n")),
        Some(_) => Err(ApiError::bad_request(field, "must be a string or an array of content parts")),
    }
}

/// A user message's content: text and images, in order.
pub(super) fn user_content(content: Option<&Value>, field: &str) -> Result<Vec<router::ContentPart>, ApiError> {
    let text = |text: String| router::ContentPart { part: Some(content_part::Part::Text(text)) };
    match content {
        None => Ok(vec![text(String::new())]),
        Some(Value::String(content)) => Ok(vec![text(content.clone())]),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(index, part)| {
                let at = format!("{field}[{index}]");
                match part_kind(part, &at)? {
                    ("text", part) => Ok(text(part_text(part, &format!("{at}.text"))?)),
                    ("image_url", part) => {
                        Ok(router::ContentPart { part: Some(content_part::Part::Image(image(part, &at)?)) })
                    }
                    (kind, _) => Err(ApiError::bad_request(
                        format!("{at}.type"),
                        format!("content parts of type `{kind}` are not supported; send text and image_url parts"),
                    )),
                }
            })
            .collect(),
        Some(_) => Err(ApiError::bad_request(field, "must be a string or an array of content parts")),
    }
}

/// An `image_url` part: an `https:` URL the vendor fetches or a `data:` URL with the bytes.
pub(super) fn image(part: &Map<String, Value>, field: &str) -> Result<router::ImagePart, ApiError> {
    let (url, detail) = match part.get("image_url") {
        Some(Value::Object(image)) => (image.get("url"), image.get("detail")),
        // Some clients send the URL itself.
        Some(url @ Value::String(_)) => (Some(url), None),
        _ => return Err(ApiError::bad_request(format!("{field}.image_url"), "is required (an object with `url`)")),
    };
    let url = match url {
        Some(Value::String(url)) => url,
        _ => return Err(ApiError::bad_request(format!("{field}.image_url.url"), "is required (a string)")),
    };
    let https = url.get(..8).is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
    let data = url
        .strip_prefix("data:image/")
        .is_some_and(|rest| rest.split_once(',').is_some_and(|(meta, _)| meta.ends_with(";base64")));
    if !(https || data) {
        return Err(ApiError::bad_request(
            format!("{field}.image_url.url"),
            "must be an https: URL or a data:image/…;base64, URL",
        ));
    }
    let detail = image_detail(detail, &format!("{field}.image_url.detail"))?;
    Ok(router::ImagePart { url: url.clone(), detail })
}
