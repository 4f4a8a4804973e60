//! The caller's function tools and `tool_choice`, in chat completions' nested shape.

use std::collections::HashSet;

use serde_json::{Map, Value};
use switchyard_proto::router::v1::{self as router, ToolChoiceMode, tool_choice};

use crate::{error::ApiError, llm_api::json::check_name};

/// `tools`: function tools only, with unique valid names and an object schema.
pub(super) fn tools(object: &Map<String, Value>) -> Result<Vec<router::ClientTool>, ApiError> {
    let tools = match object.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::bad_request("tools", "must be an array of tools")),
    };
    let mut names = HashSet::new();
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let at = |field: &str| format!("tools[{index}]{field}");
            let tool = tool.as_object().ok_or_else(|| ApiError::bad_request(at(""), "must be a tool object"))?;
            match tool.get("type") {
                Some(Value::String(kind)) if kind == "function" => {}
                Some(Value::String(kind)) => {
                    return Err(ApiError::bad_request(
                        at(".type"),
                        format!("tools of type `{kind}` are not supported; send `function` tools"),
                    ));
                }
                _ => return Err(ApiError::bad_request(at(".type"), "is required (`function`)")),
            }
            let function = match tool.get("function") {
                Some(Value::Object(function)) => function,
                _ => return Err(ApiError::bad_request(at(".function"), "is required (an object)")),
            };
            let name = match function.get("name") {
                Some(Value::String(name)) => name,
                _ => return Err(ApiError::bad_request(at(".function.name"), "is required (a string)")),
            };
            check_name(name, &at(".function.name"))?;
            if !names.insert(name.as_str()) {
                return Err(ApiError::bad_request(at(".function.name"), format!("`{name}` is defined twice")));
            }
            let description = match function.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(description)) => description.clone(),
                Some(_) => return Err(ApiError::bad_request(at(".function.description"), "must be a string")),
            };
            let parameters_json = match function.get("parameters") {
                None | Some(Value::Null) => String::new(),
                Some(parameters @ Value::Object(_)) => parameters.to_string(),
                Some(_) => {
                    return Err(ApiError::bad_request(at(".function.parameters"), "must be a JSON Schema object"));
                }
            };
            Ok(router::ClientTool { name: name.clone(), description, parameters_json })
        })
        .collect()
}

/// `tool_choice`: `auto`, `none`, `required`, or `{"type": "function", "function": {"name"}}`
/// naming one of the request's tools.
pub(super) fn tool_choice(
    object: &Map<String, Value>,
    tools: &[router::ClientTool],
) -> Result<Option<router::ToolChoice>, ApiError> {
    let mode = |mode: ToolChoiceMode| Some(router::ToolChoice { choice: Some(tool_choice::Choice::Mode(mode as i32)) });
    let choice = match object.get("tool_choice") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => mode(ToolChoiceMode::Auto),
            "none" => mode(ToolChoiceMode::None),
            "required" => mode(ToolChoiceMode::Required),
            other => {
                return Err(ApiError::bad_request(
                    "tool_choice",
                    format!("`{other}` is not `auto`, `none`, `required` or a function"),
                ));
            }
        },
        Some(Value::Object(choice)) => {
            if choice.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::bad_request("tool_choice.type", "must be `function`"));
            }
            let name = choice.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            let name = name.ok_or_else(|| ApiError::bad_request("tool_choice.function.name", "is required"))?;
            if !tools.iter().any(|tool| tool.name == name) {
                return Err(ApiError::bad_request(
                    "tool_choice.function.name",
                    format!("`{name}` is not one of the request's tools"),
                ));
            }
            Some(router::ToolChoice { choice: Some(tool_choice::Choice::Function(name.to_owned())) })
        }
        Some(_) => return Err(ApiError::bad_request("tool_choice", "must be a string or an object")),
    };
    // `auto` and `none` without tools mean what no tool_choice means; forcing a call needs tools.
    let forces = matches!(
        choice.as_ref().and_then(|c| c.choice.as_ref()),
        Some(tool_choice::Choice::Mode(m)) if *m == ToolChoiceMode::Required as i32
    );
    if tools.is_empty() && forces {
        return Err(ApiError::bad_request("tool_choice", "`required` needs `tools`"));
    }
    Ok(choice)
}
