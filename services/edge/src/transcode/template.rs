//! Path templates of `google.api.http` rules: literal segments, `{field.path}` variables that
//! each take one segment, and an optional `:verb` suffix (`/api/mcp/tools/{name}:call`).
//! The protos use nothing more; a template with `**` or a multi-segment variable is refused
//! when the edge starts, so a rule we cannot serve never fails quietly at request time.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// The request field the segment binds, as its path of proto field names.
    Variable(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    segments: Vec<Segment>,
    verb: Option<String>,
    raw: String,
}

/// A path variable's value and the field it sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub field_path: Vec<String>,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path template `{template}`: {reason}")]
pub struct TemplateError {
    template: String,
    reason: &'static str,
}

impl PathTemplate {
    pub fn parse(raw: &str) -> Result<Self, TemplateError> {
        let error = |reason| TemplateError { template: raw.to_owned(), reason };
        let rest = raw.strip_prefix('/').ok_or_else(|| error("must start with `/`"))?;
        let (path, verb) = split_verb(rest);
        let mut segments = Vec::new();
        for part in path.split('/') {
            if part.is_empty() {
                return Err(error("has an empty segment"));
            }
            if let Some(inner) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                // `{name=*}` is the long form of `{name}`; anything wider is not supported.
                let name = match inner.split_once('=') {
                    Some((name, "*")) => name,
                    Some(_) => return Err(error("multi-segment variables are not supported")),
                    None => inner,
                };
                if name.is_empty() || name.split('.').any(str::is_empty) {
                    return Err(error("has an empty variable name"));
                }
                segments.push(Segment::Variable(name.split('.').map(str::to_owned).collect()));
            } else if part.contains(['{', '}', '*']) {
                return Err(error("wildcards and partial variables are not supported"));
            } else {
                segments.push(Segment::Literal(part.to_owned()));
            }
        }
        Ok(Self { segments, verb: verb.map(str::to_owned), raw: raw.to_owned() })
    }

    /// The variables' values when `path` (already without its query) matches; `None` when it
    /// does not. Values are percent-decoded; a value that is not valid UTF-8 after decoding
    /// does not match.
    pub fn matches(&self, path: &str) -> Option<Vec<Binding>> {
        let rest = path.strip_prefix('/')?;
        let (rest, verb) = if self.verb.is_some() { split_verb(rest) } else { (rest, None) };
        if verb != self.verb.as_deref() {
            return None;
        }
        let mut parts = rest.split('/');
        let mut bindings = Vec::new();
        for segment in &self.segments {
            let part = parts.next()?;
            match segment {
                Segment::Literal(literal) => {
                    if part != literal {
                        return None;
                    }
                }
                Segment::Variable(field_path) => {
                    if part.is_empty() {
                        return None;
                    }
                    bindings.push(Binding { field_path: field_path.clone(), value: percent_decode(part)? });
                }
            }
        }
        parts.next().is_none().then_some(bindings)
    }

    /// The fields the path binds.
    pub fn variables(&self) -> impl Iterator<Item = &[String]> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Variable(path) => Some(path.as_slice()),
            Segment::Literal(_) => None,
        })
    }

    /// The template in OpenAPI's form: `{role.id}` stays, the verb stays.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Literal segments before the first variable: more specific templates are tried first.
    pub fn literal_prefix_len(&self) -> usize {
        self.segments.iter().take_while(|s| matches!(s, Segment::Literal(_))).count()
    }
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// Splits a `:verb` off the last segment (a colon inside `{…}` is not a verb).
fn split_verb(path: &str) -> (&str, Option<&str>) {
    let last_start = path.rfind('/').map_or(0, |i| i + 1);
    let last = &path[last_start..];
    match last.rfind(':') {
        Some(colon) if !last[colon..].contains('}') => (&path[..last_start + colon], Some(&last[colon + 1..])),
        _ => (path, None),
    }
}

/// `%XX` escapes to bytes, then UTF-8; `None` for a broken escape or invalid UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(path: &[&str], value: &str) -> Binding {
        Binding { field_path: path.iter().map(|s| (*s).to_owned()).collect(), value: value.to_owned() }
    }

    #[test]
    fn literal_templates_match_exactly() {
        let template = PathTemplate::parse("/api/context/sessions").unwrap();
        assert_eq!(template.matches("/api/context/sessions"), Some(vec![]));
        assert_eq!(template.matches("/api/context/sessions/x"), None);
        assert_eq!(template.matches("/api/context"), None);
        assert_eq!(template.matches("api/context/sessions"), None);
    }

    #[test]
    fn variables_bind_one_decoded_segment() {
        let template = PathTemplate::parse("/api/context/sessions/{session_id}/history").unwrap();
        assert_eq!(template.matches("/api/context/sessions/a%20b/history"), Some(vec![bind(&["session_id"], "a b")]));
        assert_eq!(template.matches("/api/context/sessions//history"), None);
        assert_eq!(template.matches("/api/context/sessions/a/b/history"), None);
        assert_eq!(template.matches("/api/context/sessions/%ZZ/history"), None);
    }

    #[test]
    fn nested_fields_and_verbs() {
        let template = PathTemplate::parse("/api/context/roles/{role.id}").unwrap();
        assert_eq!(
            template.matches("/api/context/roles/tech-expert"),
            Some(vec![bind(&["role", "id"], "tech-expert")])
        );
        let call = PathTemplate::parse("/api/mcp/tools/{name}:call").unwrap();
        assert_eq!(
            call.matches("/api/mcp/tools/everything__echo:call"),
            Some(vec![bind(&["name"], "everything__echo")])
        );
        assert_eq!(call.matches("/api/mcp/tools/everything__echo"), None);
        assert_eq!(call.matches("/api/mcp/tools/everything__echo:list"), None);
        // Without a verb in the template, a colon is part of the value.
        let roles = PathTemplate::parse("/api/triggers/roles/{role_id}").unwrap();
        assert_eq!(roles.matches("/api/triggers/roles/a:b"), Some(vec![bind(&["role_id"], "a:b")]));
    }

    #[test]
    fn unsupported_templates_are_refused() {
        for raw in ["api/x", "/api//x", "/api/{name=**}", "/api/x*", "/api/{}", "/api/{a.}"] {
            assert!(PathTemplate::parse(raw).is_err(), "{raw} should be refused");
        }
        assert!(PathTemplate::parse("/api/{name=*}").is_ok());
    }
}
