//! Turning tool descriptions and queries into terms: lowercase words, camel-case names split
//! ("ResearchHelper" → research, helper), common English words dropped, and a light suffix
//! stemmer so "papers" meets "paper" and "booking" meets "book".

/// Words too common to tell tools apart.
const STOPWORDS: &[&str] = &[
    "a", "about", "an", "and", "any", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for", "from",
    "get", "give", "have", "help", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "please",
    "some", "tell", "that", "the", "their", "there", "this", "to", "us", "use", "want", "was", "we", "what", "when",
    "where", "which", "who", "will", "with", "would", "you", "your",
];

/// The terms of `text`, in order (duplicates kept: BM25 counts them).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in split_words(text) {
        let lower = word.to_lowercase();
        if lower.len() < 2 && !lower.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if STOPWORDS.contains(&lower.as_str()) {
            continue;
        }
        out.push(stem(&lower));
    }
    out
}

/// A tool name as words for a language model: "ResearchHelper" → "Research Helper",
/// "AI2sql" → "AI 2 sql" (a model's tokenizer splits "ResearchHelper" into meaningless pieces).
pub fn name_words(name: &str) -> String {
    split_words(name).join(" ")
}

/// Words: runs of letters and digits, with camel-case boundaries ("AI2sql" → AI, 2, sql).
fn split_words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start: Option<usize> = None;
    let mut previous: Option<char> = None;
    for (at, c) in text.char_indices() {
        if !c.is_alphanumeric() {
            if let Some(s) = start.take() {
                words.push(&text[s..at]);
            }
            previous = None;
            continue;
        }
        let boundary = match previous {
            Some(p) => {
                (p.is_lowercase() && c.is_uppercase())
                    || (p.is_alphabetic() && c.is_ascii_digit())
                    || (p.is_ascii_digit() && c.is_alphabetic())
            }
            None => false,
        };
        if boundary && let Some(s) = start.take() {
            words.push(&text[s..at]);
        }
        if start.is_none() {
            start = Some(at);
        }
        previous = Some(c);
    }
    if let Some(s) = start {
        words.push(&text[s..]);
    }
    words
}

/// A light English suffix stemmer: enough to join plurals and common verb forms.
fn stem(word: &str) -> String {
    for (suffix, keep) in [("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")] {
        if let Some(root) = word.strip_suffix(suffix)
            && root.chars().count() >= 3
            && !(suffix == "s" && root.ends_with('s'))
        {
            return format!("{root}{keep}");
        }
    }
    word.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_camel_case_drops_stopwords_and_stems() {
        assert_eq!(terms("ResearchHelper"), ["research", "helper"]);
        assert_eq!(terms("AI2sql converts text"), ["ai", "2", "sql", "convert", "text"]);
        assert_eq!(terms("Can I find academic research papers?"), ["find", "academic", "research", "paper"]);
        assert_eq!(terms("booking flights and hotels"), ["book", "flight", "hotel"]);
        assert_eq!(terms("class glass"), ["class", "glass"]);
        assert_eq!(name_words("ResearchHelper"), "Research Helper");
        assert_eq!(name_words("AI2sql"), "AI 2 sql");
    }
}
