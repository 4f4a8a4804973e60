//! Regex triggers, apart from matching: checking one when it is registered (it parses, cannot
//! match the empty string, compiles within the size limit), and planning how the matcher finds
//! where one may match — by prefix literals in its automaton, by first bytes, or by a scan.

use regex_automata::{MatchKind, meta, util::syntax};
use regex_syntax::hir::literal::{ExtractKind, Extractor};

use crate::text::normalize;

/// Shortest all-letter prefix literal worth prefiltering on; shorter words ("a", "of") would
/// fire on most queries. Prefixes with a digit or symbol (`$`, `5`, `q1`) are rare in prose
/// and qualify at any length.
const MIN_WORD_PREFIX_BYTES: usize = 3;
/// Most prefix literals extracted from one regex (a Unicode `\d` alone is several hundred).
const MAX_PREFIXES: usize = 2048;
/// Most prefix literals one regex may put into the literal automaton.
const MAX_AUTOMATON_PREFIXES: usize = 64;

fn regex_syntax_config() -> syntax::Config {
    syntax::Config::new().case_insensitive(true).unicode(true).nest_limit(64)
}

/// Checks a regex trigger: it parses, cannot match the empty string (it would match every
/// query), and compiles within `max_regex_bytes`.
pub fn validate_regex(pattern: &str, max_regex_bytes: usize) -> Result<(), String> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(true)
        .case_insensitive(true)
        .nest_limit(64)
        .build()
        .parse(pattern)
        .map_err(|err| match err {
            regex_syntax::Error::Parse(e) => format!("invalid regex: {}", e.kind()),
            regex_syntax::Error::Translate(e) => format!("invalid regex: {}", e.kind()),
            other => format!("invalid regex: {other}"),
        })?;
    if hir.properties().minimum_len() == Some(0) {
        return Err(format!("regex `{pattern}` can match the empty string, so it would match every query"));
    }
    meta::Builder::new()
        .syntax(regex_syntax_config())
        .configure(meta::Config::new().nfa_size_limit(Some(max_regex_bytes)))
        .build(pattern)
        .map_err(|err| match err.size_limit() {
            Some(limit) => format!("regex is too large: its compiled form exceeds the limit of {limit} bytes"),
            None => format!("invalid regex: {err}"),
        })?;
    Ok(())
}

/// How a regex trigger's candidate start positions are found.
#[derive(Debug, PartialEq)]
pub(crate) enum RegexRoute {
    /// Every match starts with one of these (lowercase) literals, all selective: they join
    /// the literal automaton.
    Literals(Vec<String>),
    /// Every match starts with one of these bytes, none an ASCII letter (e.g. `$`, digits,
    /// lead bytes of non-Latin digits): candidates are the positions holding them.
    FirstBytes(Vec<u8>),
    /// No usable start: run with the multi-pattern scan over the whole query.
    Scan,
}

pub(crate) fn route_regex(pattern: &str) -> RegexRoute {
    let Ok(hir) = regex_syntax::ParserBuilder::new().unicode(true).build().parse(pattern) else {
        return RegexRoute::Scan;
    };
    // The extractor's default limits give short, exact-enough prefixes ("mortgag" for
    // `mortgag(?:e|es|ing)`), which is what the automaton wants.
    let selective = |t: &String| t.len() >= MIN_WORD_PREFIX_BYTES || t.chars().any(|c| !c.is_alphabetic());
    // Capping the total makes a cross product of alternations stop early with shorter
    // prefixes ("write a ", "compose my ") instead of giving up.
    let mut defaults = Extractor::new();
    defaults.kind(ExtractKind::Prefix).limit_total(MAX_AUTOMATON_PREFIXES);
    if let Some(texts) = prefix_texts(&hir, &defaults)
        && texts.len() <= MAX_AUTOMATON_PREFIXES
        && texts.iter().all(selective)
    {
        return RegexRoute::Literals(texts);
    }
    // Large classes (a Unicode `\d`) need generous limits to stay finite; only their first
    // bytes are kept.
    let mut generous = Extractor::new();
    generous.kind(ExtractKind::Prefix).limit_class(MAX_PREFIXES).limit_total(MAX_PREFIXES).limit_literal_len(4);
    let Some(texts) = prefix_texts(&hir, &generous) else { return RegexRoute::Scan };
    let mut first_bytes: Vec<u8> = texts.iter().map(|t| t.as_bytes()[0]).collect();
    first_bytes.sort_unstable();
    first_bytes.dedup();
    if first_bytes.iter().any(u8::is_ascii_alphabetic) { RegexRoute::Scan } else { RegexRoute::FirstBytes(first_bytes) }
}

/// The normalized, deduplicated prefix literals of `hir`, when the set is finite and none is
/// empty.
fn prefix_texts(hir: &regex_syntax::hir::Hir, extractor: &Extractor) -> Option<Vec<String>> {
    let seq = extractor.extract(hir);
    let mut texts = Vec::new();
    for literal in seq.literals()? {
        let text = normalize(std::str::from_utf8(literal.as_bytes()).ok()?);
        if text.is_empty() {
            return None;
        }
        texts.push(text);
    }
    texts.sort();
    texts.dedup();
    (!texts.is_empty()).then_some(texts)
}

pub(crate) fn build_regex_set(patterns: &[String], kind: MatchKind) -> Result<Option<meta::Regex>, String> {
    if patterns.is_empty() {
        return Ok(None);
    }
    meta::Builder::new()
        .syntax(regex_syntax_config())
        .configure(meta::Config::new().match_kind(kind).nfa_size_limit(None))
        .build_many(patterns)
        .map(Some)
        .map_err(|err| format!("regex set: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_are_routed_by_their_prefix_literals() {
        assert_eq!(
            route_regex(r"\bMortgag(?:e|es|ing)\b"),
            RegexRoute::Literals(vec!["mortgage".into(), "mortgages".into(), "mortgaging".into()])
        );
        assert!(matches!(
            route_regex(r"\b(?:write|compose) (?:a|an|my) (?:song|poem|story|novel)\b"),
            RegexRoute::Literals(_)
        ));
        assert_eq!(route_regex(r"\$\s?\d+"), RegexRoute::Literals(vec!["$".to_owned()]));
        assert_eq!(route_regex(r"\bq[1-2]\b"), RegexRoute::Literals(vec!["q1".to_owned(), "q2".to_owned()]));
        let RegexRoute::FirstBytes(bytes) = route_regex(r"\d+ mg") else { panic!("digits lead") };
        assert!(bytes.contains(&b'7') && bytes.iter().any(|b| !b.is_ascii()), "Unicode digits too");
        assert_eq!(route_regex(r"\bq\w"), RegexRoute::Scan, "a one-letter prefix is not selective");
        assert_eq!(route_regex(r"\w+ing"), RegexRoute::Scan, "no finite prefix set");
    }

    #[test]
    fn dangerous_regexes_are_rejected() {
        let limit = 256 * 1024; // the default --max-regex-bytes
        assert!(validate_regex("a*", limit).unwrap_err().contains("empty string"));
        assert!(validate_regex("(unclosed", limit).unwrap_err().starts_with("invalid regex"));
        assert!(validate_regex(r"(?<=a)b", limit).unwrap_err().starts_with("invalid regex"));
        let huge = validate_regex(r"\w{1000}{1000}", limit).unwrap_err();
        assert!(huge.contains("too large") || huge.starts_with("invalid regex"), "{huge}");
        assert!(validate_regex(r"\bfoo\d+", limit).is_ok());
    }
}
