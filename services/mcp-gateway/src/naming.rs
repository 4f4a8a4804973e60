//! Gateway tool names: `<server>__<tool>`, always a valid MCP tool name (1 to 64 characters of
//! `[A-Za-z0-9_./-]`), unique across servers, and the same on every replica and every restart
//! (clients remember tool names), so every rule here is deterministic.

/// Between the server name and the tool name.
pub const SEPARATOR: &str = "__";
/// Longest valid MCP tool name.
pub const MAX_NAME: usize = 64;
/// The gateway's own tool (docs/requirements.md#mcp-set-context).
pub const SET_CONTEXT: &str = "set_context";
/// Search mode's tool search (`--tool-mode search`).
pub const FIND_TOOLS: &str = "find_tools";
/// Search mode's call of any tool by name.
pub const CALL_TOOL: &str = "call_tool";

fn valid_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

pub fn is_valid(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && name.chars().all(valid_char)
}

/// FNV-1a: stable across Rust releases and machines, unlike `DefaultHasher`.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193))
}

/// Replaces characters a tool name may not have with `_`, and shortens a name over 64
/// characters to its first 55 plus `_` and a hash of the whole, so two long names that share
/// a beginning stay apart.
pub fn sanitize(raw: &str) -> String {
    let mut name: String = raw.chars().map(|c| if valid_char(c) { c } else { '_' }).collect();
    if name.is_empty() {
        name.push('_');
    }
    if name.len() > MAX_NAME {
        let hash = fnv1a(raw);
        name.truncate(MAX_NAME - 9);
        name.push_str(&format!("_{hash:08x}"));
    }
    name
}

/// Names one server's tool. `prefix` puts the server name first (the default); without it
/// the tool keeps its own name unless that is taken.
pub fn base_name(server: &str, tool: &str, prefix: bool) -> String {
    if prefix { sanitize(&format!("{server}{SEPARATOR}{tool}")) } else { sanitize(tool) }
}

/// Assigns names to `(server, tool)` pairs, in order. A pair whose name is taken (by an
/// earlier pair, or by `set_context`) gets the prefixed form, then `_2`, `_3`… — so the
/// first-configured server keeps the plain name. Returns the names and the collisions
/// resolved, for logging.
pub fn assign(pairs: &[(&str, &str)], prefix: bool) -> (Vec<String>, Vec<String>) {
    let mut taken = std::collections::HashSet::from([SET_CONTEXT.to_owned()]);
    // The next counter to try for a stem: names are never given back, so the counters below it
    // are taken, and many tools of one name cost one step each rather than a scan each.
    let mut next_counter: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut notes = Vec::new();
    let names = pairs
        .iter()
        .map(|(server, tool)| {
            let first = base_name(server, tool, prefix);
            let mut candidate = first.clone();
            if taken.contains(&candidate) && !prefix {
                candidate = base_name(server, tool, true);
            }
            if taken.contains(&candidate) {
                let stem = candidate.clone();
                let counter = next_counter.entry(stem.clone()).or_insert(2);
                while taken.contains(&candidate) {
                    let suffix = format!("_{counter}");
                    let mut shortened = stem.clone();
                    shortened.truncate(MAX_NAME - suffix.len());
                    candidate = format!("{shortened}{suffix}");
                    *counter += 1;
                }
            }
            if candidate != first {
                notes.push(format!(
                    "tool `{tool}` of server `{server}` is exposed as `{candidate}` (`{first}` is taken)"
                ));
            }
            taken.insert(candidate.clone());
            candidate
        })
        .collect();
    (names, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server listing thousands of tools of one name used to cost n² steps (each name scanned
    /// the counters from 2): bounded time for what a server sends.
    #[test]
    fn many_tools_of_one_name_are_named_in_linear_time() {
        let pairs: Vec<(&str, &str)> = (0..20_000).map(|_| ("s", "same")).collect();
        let start = std::time::Instant::now();
        let (names, _) = assign(&pairs, true);
        assert!(start.elapsed() < std::time::Duration::from_secs(1), "took {:?}", start.elapsed());
        assert_eq!(names[0], "s__same");
        assert_eq!(names[1], "s__same_2");
        assert_eq!(names[19_999], "s__same_20000");
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn prefixed_names_are_valid() {
        assert_eq!(base_name("files", "read_file", true), "files__read_file");
        assert_eq!(base_name("x", "get weather!", true), "x__get_weather_");
        let long = base_name("server", &"a".repeat(100), true);
        assert!(is_valid(&long) && long.len() == MAX_NAME, "{long}");
        let other = base_name("server", &format!("{}b", "a".repeat(99)), true);
        assert_ne!(long, other, "long names sharing a beginning stay distinct");
    }

    #[test]
    fn collisions_are_resolved_in_order() {
        let (names, notes) = assign(&[("a", "echo"), ("b", "echo"), ("c", "set_context")], false);
        assert_eq!(names, ["echo", "b__echo", "c__set_context"]);
        assert_eq!(notes.len(), 2);
        let (names, _) = assign(&[("a", "x y"), ("a", "x_y")], true);
        assert_eq!(names, ["a__x_y", "a__x_y_2"]);
        assert!(names.iter().all(|n| is_valid(n)));
    }
}
