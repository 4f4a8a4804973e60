//! Large tool catalogs for the MCP gateway's scale tests and benchmarks, generated from a
//! few hundred real tool descriptions (MetaTool's, in the gateway's tests/data), so nothing
//! large is committed. Deterministic: the same base and count give the same tools.
//!
//! Tool `i` is base tool `i % base.len()` in variant `v = i / base.len()`: a domain qualifier
//! in its name and description, a second sentence, and one of several parameter sets. Every
//! tool's name and text differ, so each is embedded on its own (nothing is deduplicated away),
//! and tools of one base stay close in meaning, as real near-duplicate servers do.

use rmcp::model::Tool;

use crate::mcp::tool;

/// Domain qualifiers: who or what the variant is for.
const DOMAINS: [(&str, &str); 12] = [
    ("", ""),
    ("finance", "for finance teams"),
    ("health", "for clinics and healthcare staff"),
    ("edu", "for classrooms and teachers"),
    ("retail", "for online shops"),
    ("legal", "for law firms"),
    ("travel", "for travel agencies"),
    ("gov", "for public administrations"),
    ("media", "for newsrooms"),
    ("eng", "for engineering teams"),
    ("ngo", "for non-profits"),
    ("home", "for households"),
];

/// Second sentences of a variant's description.
const NOTES: [&str; 5] = [
    "",
    " Results can be exported as CSV.",
    " Works offline once set up.",
    " Answers in the user's language.",
    " Free tier with daily limits.",
];

/// Parameter sets a variant takes (all required strings).
const PARAMETERS: [&[&str]; 6] =
    [&["input"], &["query", "limit"], &["url"], &["text", "language"], &["location", "date"], &["file_path", "format"]];

/// `count` tools from `base` (`(name, description)` pairs), in variants as described above.
pub fn varied_tools(base: &[(String, String)], count: usize) -> Vec<Tool> {
    assert!(!base.is_empty(), "a catalog needs base tools");
    (0..count)
        .map(|i| {
            let (name, description) = &base[i % base.len()];
            let variant = i / base.len();
            let (slug, qualifier) = DOMAINS[variant % DOMAINS.len()];
            let note = NOTES[(variant / DOMAINS.len()) % NOTES.len()];
            let parameters = PARAMETERS[(i + variant) % PARAMETERS.len()];
            // Names stay short (the gateway adds its server prefix) and unique by `i`.
            let stem: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).take(24).collect();
            let name = if slug.is_empty() { format!("{stem}_{i}") } else { format!("{stem}_{slug}_{i}") };
            let description = if qualifier.is_empty() {
                format!("{description}{note}")
            } else {
                format!("{description} Edition {qualifier}.{note}")
            };
            tool(&name, &description, parameters)
        })
        .collect()
}

/// `(name, description)` pairs from JSON lines with those two fields.
pub fn base_tools(jsonl: &str) -> Vec<(String, String)> {
    jsonl
        .lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|v| (v["name"].as_str().unwrap_or("").to_owned(), v["description"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn base() -> Vec<(String, String)> {
        base_tools(
            "{\"name\": \"AI2sql\", \"description\": \"Converts a natural language text into an SQL query.\"}\n\
             {\"name\": \"Weather Now\", \"description\": \"Current weather for a city.\"}\n",
        )
    }

    #[test]
    fn every_tool_is_distinct_and_the_same_each_time() {
        let tools = varied_tools(&base(), 500);
        assert_eq!(tools.len(), 500);
        let names: HashSet<_> = tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names.len(), 500, "names are unique");
        let texts: HashSet<_> = tools.iter().map(|t| t.description.clone()).collect();
        assert!(texts.len() >= 2 * 12 * 5, "descriptions vary across variants: {}", texts.len());
        assert_eq!(varied_tools(&base(), 500), tools, "deterministic");
        assert!(
            tools.iter().all(|t| t.name.len() <= 40 && t.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        );
    }

    #[test]
    fn variants_keep_the_base_description() {
        let tools = varied_tools(&base(), 30);
        assert_eq!(tools[0].description.as_deref(), Some("Converts a natural language text into an SQL query."));
        let variant = tools[2].description.as_deref().unwrap();
        assert!(variant.starts_with("Converts a natural language text into an SQL query. Edition for finance"));
    }
}
