//! Ownership of what is passed through: which server a prompt (by its gateway name) or a
//! resource (by its URI, listed or matching a template) belongs to.

use std::sync::Arc;

use rmcp::{ErrorData as McpError, model::Prompt};

use super::McpHandler;
use crate::{naming, upstream::Upstream};

/// A prompt under its gateway name.
pub(super) struct PromptEntry {
    pub(super) name: String,
    pub(super) server: Arc<Upstream>,
    /// The server's prompt, under its own name.
    pub(super) prompt: Prompt,
}

impl McpHandler {
    /// Every server's prompts, named like tools (`<server>__<prompt>`, or their own names when
    /// prefixing is off and they are free).
    pub(super) fn prompts(&self) -> Vec<PromptEntry> {
        let servers = self.gateway.upstreams().servers();
        let listed: Vec<(Arc<Upstream>, Prompt)> = servers
            .iter()
            .flat_map(|s| s.listing().prompts.iter().map(|p| (s.clone(), p.clone())).collect::<Vec<_>>())
            .collect();
        let pairs: Vec<(&str, &str)> = listed.iter().map(|(s, p)| (s.name(), p.name.as_str())).collect();
        let (names, _) = naming::assign(&pairs, self.gateway.settings().prefix_tools);
        listed.into_iter().zip(names).map(|((server, prompt), name)| PromptEntry { name, server, prompt }).collect()
    }

    pub(super) fn prompt(&self, name: &str) -> Result<PromptEntry, McpError> {
        self.prompts()
            .into_iter()
            .find(|entry| entry.name == name)
            .ok_or_else(|| McpError::invalid_params(format!("unknown prompt `{name}`"), None))
    }

    /// The server that listed `uri`, else the first whose templates could produce it.
    pub(super) fn resource_owner(&self, uri: &str) -> Result<Arc<Upstream>, McpError> {
        let servers = self.gateway.upstreams().servers();
        servers
            .iter()
            .find(|s| s.listing().resources.iter().any(|r| r.uri == uri))
            .or_else(|| {
                servers
                    .iter()
                    .find(|s| s.listing().resource_templates.iter().any(|t| template_matches(&t.uri_template, uri)))
            })
            .cloned()
            .ok_or_else(|| McpError::resource_not_found(format!("no server offers resource `{uri}`"), None))
    }
}

/// Whether `uri` could come from an RFC 6570 level-1 template (`file:///{path}`): the literal
/// parts must appear in order.
fn template_matches(template: &str, uri: &str) -> bool {
    let mut rest = uri;
    let mut pieces = template.split('{').enumerate().peekable();
    while let Some((i, piece)) = pieces.next() {
        let literal = if i == 0 { piece } else { piece.split_once('}').map_or("", |(_, after)| after) };
        if i == 0 {
            match rest.strip_prefix(literal) {
                Some(after) => rest = after,
                None => return false,
            }
        } else if pieces.peek().is_none() && !literal.is_empty() {
            return rest.ends_with(literal);
        } else if let Some(at) = rest.find(literal) {
            rest = &rest[at + literal.len()..];
        } else {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        assert!(template_matches("demo://resource/static/document/{name}", "demo://resource/static/document/a.md"));
        assert!(template_matches("test://{id}/data.json", "test://7/data.json"));
        assert!(!template_matches("test://{id}/data.json", "test://7/data.xml"));
        assert!(!template_matches("other://{x}", "test://1"));
    }
}
