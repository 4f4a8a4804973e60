//! The caller's own function tools and its tool choice: names as the vendors accept them,
//! schemas as JSON objects.

use std::collections::HashSet;

use switchyard_llm::{ToolChoice, ToolSpec};
use switchyard_proto::router::v1 as pb;

use crate::{
    error::RouterError,
    limits::{MAX_CLIENT_TOOLS, MAX_TOOL_NAME_BYTES, MAX_TOOL_SCHEMA_BYTES},
};

/// A tool name as the vendors accept it: 1 to 64 characters of [A-Za-z0-9_-].
pub(super) fn check_tool_name(field: &str, name: &str) -> Result<(), RouterError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TOOL_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(RouterError::invalid(field, format!("must be 1 to {MAX_TOOL_NAME_BYTES} characters of [A-Za-z0-9_-]")))
    }
}

/// A JSON Schema given as text: a JSON object (`{"type":"object"}` when empty).
pub(super) fn schema_object(field: &str, text: &str) -> Result<serde_json::Value, RouterError> {
    if text.trim().is_empty() {
        return Ok(serde_json::json!({"type": "object"}));
    }
    if text.len() > MAX_TOOL_SCHEMA_BYTES {
        return Err(RouterError::invalid(field, format!("is longer than {MAX_TOOL_SCHEMA_BYTES} bytes")));
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => Err(RouterError::invalid(field, "must be a JSON object (a JSON Schema)")),
        Err(err) => Err(RouterError::invalid(field, format!("is not valid JSON: {err}"))),
    }
}

pub(super) fn client_tools(tools: Vec<pb::ClientTool>) -> Result<Vec<ToolSpec>, RouterError> {
    if tools.len() > MAX_CLIENT_TOOLS {
        return Err(RouterError::invalid(
            "tools",
            format!("has {} tools; at most {MAX_CLIENT_TOOLS} are accepted", tools.len()),
        ));
    }
    let mut seen: HashSet<String> = HashSet::new();
    tools
        .into_iter()
        .enumerate()
        .map(|(i, tool)| {
            check_tool_name(&format!("tools[{i}].name"), &tool.name)?;
            if !seen.insert(tool.name.clone()) {
                return Err(RouterError::invalid(
                    format!("tools[{i}].name"),
                    format!("`{}` is listed twice", tool.name),
                ));
            }
            if tool.description.len() > MAX_TOOL_SCHEMA_BYTES {
                return Err(RouterError::invalid(
                    format!("tools[{i}].description"),
                    format!("is longer than {MAX_TOOL_SCHEMA_BYTES} bytes"),
                ));
            }
            let parameters = schema_object(&format!("tools[{i}].parameters_json"), &tool.parameters_json)?;
            Ok(ToolSpec { name: tool.name, description: tool.description, parameters })
        })
        .collect()
}

pub(super) fn tool_choice(choice: Option<pb::ToolChoice>, tools: &[ToolSpec]) -> Result<ToolChoice, RouterError> {
    let choice = match choice.and_then(|c| c.choice) {
        None => return Ok(ToolChoice::Auto),
        Some(pb::tool_choice::Choice::Mode(mode)) => match pb::ToolChoiceMode::try_from(mode) {
            Ok(pb::ToolChoiceMode::Unspecified | pb::ToolChoiceMode::Auto) => ToolChoice::Auto,
            Ok(pb::ToolChoiceMode::None) => ToolChoice::None,
            Ok(pb::ToolChoiceMode::Required) => ToolChoice::Required,
            Err(_) => return Err(RouterError::invalid("tool_choice.mode", format!("unknown mode {mode}"))),
        },
        Some(pb::tool_choice::Choice::Function(name)) => {
            if !tools.iter().any(|t| t.name == name) {
                return Err(RouterError::invalid(
                    "tool_choice.function",
                    format!("`{name}` is not one of the request's tools"),
                ));
            }
            ToolChoice::Function(name)
        }
    };
    if tools.is_empty() && choice != ToolChoice::Auto {
        return Err(RouterError::invalid("tool_choice", "needs tools"));
    }
    Ok(choice)
}
