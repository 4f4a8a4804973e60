//! How queries and literal patterns are compared: normalized text, and what counts as a word
//! character for whole-word matching.

/// Lowercases (per character, so results do not depend on context) and collapses every run
/// of white space to one space, trimming the ends. Queries and literal patterns both go
/// through this, so matching is case-insensitive and indifferent to spacing.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Characters that make up words for whole-word matching.
pub fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_lowercases_unicode_and_collapses_space() {
        assert_eq!(normalize("  Hello\t\n  WORLD  "), "hello world");
        assert_eq!(normalize("ÉCOLE Straße"), "école straße");
        assert_eq!(normalize("ΣΟΦΟΣ"), "σοφοσ");
        assert_eq!(normalize(""), "");
        assert_eq!(normalize("a\u{0b}b\u{0c}c\r\nd"), "a b c d", "ASCII white space as char::is_whitespace");
        assert_eq!(normalize("a\u{a0}\u{2003}b"), "a b", "Unicode white space");
        assert_eq!(normalize("İstanbul"), "i\u{307}stanbul", "lowercasing may lengthen");
    }
}
