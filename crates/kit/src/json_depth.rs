//! How deep a JSON text nests, found by one pass over its bytes without parsing it. serde_json
//! refuses nesting past 127 levels with "recursion limit exceeded at line 1 column N", which
//! names no field; the HTTP endpoints check first with this, so the caller learns which of its
//! fields is hostile (a tool's arguments nested a hundred thousand deep, say).

/// The nesting the HTTP endpoints accept in a request body, below serde_json's own limit.
pub const MAX_DEPTH: usize = 100;

/// Where `text` nests deeper than `limit` objects and arrays: the path of the last member
/// named on the way down (`arguments.message`, `messages[1].content[0].input`; positions in
/// arrays below it are left out), empty when the text nests without naming one (`[[[...]]]`);
/// `None` when it stays within the limit. Text that is not JSON is read as far as its brackets
/// go: the parser that follows says what else is wrong with it.
pub fn too_deep(text: &[u8], limit: usize) -> Option<String> {
    let mut open: Vec<Level> = Vec::new();
    let mut at = 0;
    while at < text.len() {
        match text[at] {
            b'"' => {
                let start = at + 1;
                at += 1;
                while at < text.len() && text[at] != b'"' {
                    // An escape takes the next byte with it (an escaped quote ends nothing).
                    at += if text[at] == b'\\' { 2 } else { 1 };
                }
                let string = &text[start..at.min(text.len())];
                if let Some(level) = open.last_mut()
                    && level.in_object
                    && level.expect_key
                {
                    level.key = Some(String::from_utf8_lossy(string).into_owned());
                    level.expect_key = false;
                }
            }
            bracket @ (b'{' | b'[') => {
                if open.len() >= limit {
                    return Some(path(&open));
                }
                let in_object = bracket == b'{';
                open.push(Level { in_object, expect_key: in_object, key: None, index: 0 });
            }
            b'}' | b']' => {
                open.pop();
            }
            b',' => {
                if let Some(level) = open.last_mut() {
                    if level.in_object {
                        level.expect_key = true;
                    } else {
                        level.index += 1;
                    }
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// One open object or array, and where in it the scan is.
struct Level {
    in_object: bool,
    /// The next string in this object is a member's name.
    expect_key: bool,
    /// The member being read, in an object.
    key: Option<String>,
    /// The element being read, in an array.
    index: usize,
}

fn path(open: &[Level]) -> String {
    let mut path = String::new();
    let mut named = 0;
    for level in open {
        if level.in_object {
            let Some(key) = &level.key else { break };
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            named = path.len();
        } else {
            path.push_str(&format!("[{}]", level.index));
        }
    }
    path.truncate(named);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn the_member_where_nesting_passes_the_limit_is_named() {
        let deep = nested(1000);
        let arguments = format!(r#"{{"session_id": "s", "arguments": {{"message": {deep}}}}}"#);
        assert_eq!(too_deep(arguments.as_bytes(), MAX_DEPTH).as_deref(), Some("arguments.message"));
        let messages = format!(
            r#"{{"messages": [{{"role": "user", "content": "a, b: {{[\"x"}}, {{"role": "assistant",
            "content": [{{"type": "tool_use", "input": {{"x": {deep}}}}}]}}]}}"#
        );
        assert_eq!(too_deep(messages.as_bytes(), MAX_DEPTH).as_deref(), Some("messages[1].content[0].input.x"));
        assert_eq!(too_deep(deep.as_bytes(), MAX_DEPTH).as_deref(), Some(""));
    }

    #[test]
    fn nesting_up_to_the_limit_passes_and_one_more_does_not() {
        assert_eq!(too_deep(nested(MAX_DEPTH).as_bytes(), MAX_DEPTH), None);
        assert_eq!(too_deep(nested(MAX_DEPTH + 1).as_bytes(), MAX_DEPTH).as_deref(), Some(""));
        // Many levels one after another are not one deep level.
        let wide = format!("[{}]", vec![nested(MAX_DEPTH - 1); 1000].join(","));
        assert_eq!(too_deep(wide.as_bytes(), MAX_DEPTH), None);
        // Brackets in strings are text.
        let text = format!(r#"{{"q": "{}"}}"#, "[".repeat(1000));
        assert_eq!(too_deep(text.as_bytes(), MAX_DEPTH), None);
    }

    #[test]
    fn serde_json_reads_what_passes() {
        let text = format!(r#"{{"a": {}}}"#, nested(MAX_DEPTH - 1));
        assert_eq!(too_deep(text.as_bytes(), MAX_DEPTH), None);
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    }
}
