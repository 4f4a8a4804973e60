//! Evaluation cases: three-way `{"message", "route"}` lines or MetaTool's
//! `{"query", "needs_tools"}` lines, never both in one file.

use serde_json::Value;
use switchyard_fastroute::Route;

/// What a file's cases are labelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    ThreeWay,
    /// Only direct or not: a predicted `mcp_agent` or `multiagent` both count as "tools".
    NeedsTools,
}

impl Labels {
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Labels::ThreeWay => &["direct", "mcp_agent", "multiagent"],
            Labels::NeedsTools => &["direct", "tools"],
        }
    }

    /// The class a route falls in under these labels (an index into [`Labels::names`]).
    pub fn class(self, route: Route) -> usize {
        match self {
            Labels::ThreeWay => route.index(),
            Labels::NeedsTools => usize::from(route != Route::Direct),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Case {
    pub message: String,
    /// Index into the labels' names.
    pub expected: usize,
}

/// Parses a cases file; the error names the line (from 1).
pub fn parse(text: &str) -> Result<(Labels, Vec<Case>), String> {
    let mut labels = None;
    let mut cases = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(raw).map_err(|err| format!("line {line}: not JSON: {err}"))?;
        let (kind, message, expected) = match (
            &value["message"],
            &value["route"],
            &value["query"],
            &value["needs_tools"],
        ) {
            (Value::String(message), Value::String(route), Value::Null, Value::Null) => {
                let route = route.parse::<Route>().map_err(|err| format!("line {line}: {err}"))?;
                (Labels::ThreeWay, message, route.index())
            }
            (Value::Null, Value::Null, Value::String(query), Value::Bool(needs_tools)) => {
                (Labels::NeedsTools, query, usize::from(*needs_tools))
            }
            _ => {
                return Err(format!(
                    "line {line}: expected {{\"message\": string, \"route\": string}} or {{\"query\": string, \"needs_tools\": bool}}"
                ));
            }
        };
        if *labels.get_or_insert(kind) != kind {
            return Err(format!("line {line}: mixes the three-way and needs-tools formats"));
        }
        if message.trim().is_empty() {
            return Err(format!("line {line}: the message is empty"));
        }
        cases.push(Case { message: message.trim().to_owned(), expected });
    }
    let labels = labels.ok_or("no cases in the file")?;
    Ok((labels, cases))
}

/// The fold of a case: a hash of its text, so the same text always lands in the same fold
/// (and a duplicate can never be both trained on and tested).
pub fn fold_of(message: &str, folds: usize) -> usize {
    // FNV-1a: stable across runs and platforms, unlike the standard library's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in message.trim().to_lowercase().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % folds.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_formats_and_names_bad_lines() {
        let (labels, cases) = parse("{\"message\": \"hi\", \"route\": \"direct\"}\n\n").unwrap();
        assert_eq!((labels, cases.len(), cases[0].expected), (Labels::ThreeWay, 1, 0));
        let (labels, cases) = parse("{\"query\": \"weather?\", \"needs_tools\": true}").unwrap();
        assert_eq!((labels, cases[0].expected), (Labels::NeedsTools, 1));
        let mixed = "{\"query\": \"a\", \"needs_tools\": true}\n{\"message\": \"b\", \"route\": \"direct\"}";
        assert!(parse(mixed).unwrap_err().starts_with("line 2:"));
        assert!(parse("{\"message\": \"a\", \"route\": \"tools\"}").unwrap_err().starts_with("line 1: unknown route"));
        assert!(parse("\n{oops").unwrap_err().starts_with("line 2: not JSON"));
        assert!(parse("{\"query\": \"a\", \"needs_tools\": \"yes\"}").unwrap_err().starts_with("line 1: expected"));
        assert!(parse("").is_err());
    }

    #[test]
    fn folds_depend_on_the_text_only() {
        assert_eq!(fold_of(" Hello ", 5), fold_of("hello", 5));
        assert!(fold_of("anything", 3) < 3);
    }
}
