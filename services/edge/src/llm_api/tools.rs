//! The caller's tools and `tool_choice`, read once for every API into the router's
//! `ClientTool`s and `ToolChoice`. The APIs spell them differently (chat completions nests a
//! tool in `function` and names the forced one at `tool_choice.function.name`, Responses puts
//! both flat, Anthropic calls the schema `input_schema` and a mode a `type`); a [`ToolWire`]
//! says where each part sits, and the rules and the field a refusal names are the same for all:
//! names of 1 to 64 `[A-Za-z0-9_-]` defined once, a schema that is a JSON object, a forced tool
//! that is one of the request's, a forcing mode only with tools.

use serde_json::{Map, Value};
use switchyard_proto::router::v1::{self as router, ToolChoiceMode, tool_choice::Choice};

use crate::{
    error::ApiError,
    llm_api::json::{bool_field, check_name},
};

/// Where one API puts the parts of its tools and of its `tool_choice`.
pub(crate) struct ToolWire {
    /// The `type` of the caller's own tools; other types (a vendor's built-in tools) are refused.
    kind: &'static str,
    /// Whether a tool may leave its `type` out.
    kind_optional: bool,
    /// The member holding a tool's name, description and schema, when not the tool itself.
    holder: Option<&'static str>,
    /// The member holding the tool's JSON Schema, and whether a tool must have one.
    schema: &'static str,
    schema_required: bool,
    /// The modes by their names on this wire (`auto`, `none`, and the one that forces a call).
    modes: [(&'static str, ToolChoiceMode); 3],
    /// Whether a mode is `tool_choice` itself as a string (OpenAI), or its object's `type`.
    modes_are_strings: bool,
    /// The `type` of a `tool_choice` that forces one tool, and the path to that tool's name.
    forced: &'static str,
    forced_name: &'static [&'static str],
}

const OPENAI_MODES: [(&str, ToolChoiceMode); 3] =
    [("auto", ToolChoiceMode::Auto), ("none", ToolChoiceMode::None), ("required", ToolChoiceMode::Required)];

/// `/v1/chat/completions`: `{"type": "function", "function": {"name", "description",
/// "parameters"}}`; `tool_choice` a mode or `{"type": "function", "function": {"name"}}`.
pub(crate) const CHAT_COMPLETIONS: ToolWire = ToolWire {
    kind: "function",
    kind_optional: false,
    holder: Some("function"),
    schema: "parameters",
    schema_required: false,
    modes: OPENAI_MODES,
    modes_are_strings: true,
    forced: "function",
    forced_name: &["function", "name"],
};

/// `/v1/responses`: `{"type": "function", "name", "description", "parameters", "strict"}`;
/// `tool_choice` a mode or `{"type": "function", "name"}`.
pub(crate) const RESPONSES: ToolWire = ToolWire { holder: None, forced_name: &["name"], ..CHAT_COMPLETIONS };

/// `/v1/messages`: `{"name", "description", "input_schema"}` (`type` `custom` or none);
/// `tool_choice` `{"type": "auto" | "any" | "none" | "tool", "name"}`.
pub(crate) const MESSAGES: ToolWire = ToolWire {
    kind: "custom",
    kind_optional: true,
    holder: None,
    schema: "input_schema",
    schema_required: true,
    modes: [("auto", ToolChoiceMode::Auto), ("none", ToolChoiceMode::None), ("any", ToolChoiceMode::Required)],
    modes_are_strings: false,
    forced: "tool",
    forced_name: &["name"],
};

/// `tools`: the caller's own tools, each with a unique valid name and an object schema.
pub(crate) fn client_tools(tools: Option<&Value>, wire: &ToolWire) -> Result<Vec<router::ClientTool>, ApiError> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::bad_request("tools", "must be an array of tools")),
    };
    let mut out: Vec<router::ClientTool> = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        let tool = client_tool(tool, &format!("tools[{index}]"), wire)?;
        if out.iter().any(|t| t.name == tool.name) {
            let field = match wire.holder {
                Some(holder) => format!("tools[{index}].{holder}.name"),
                None => format!("tools[{index}].name"),
            };
            return Err(ApiError::bad_request(field, format!("`{}` is defined twice", tool.name)));
        }
        out.push(tool);
    }
    Ok(out)
}

fn client_tool(tool: &Value, at: &str, wire: &ToolWire) -> Result<router::ClientTool, ApiError> {
    let tool = tool.as_object().ok_or_else(|| ApiError::bad_request(at, "must be a tool object"))?;
    match tool.get("type") {
        Some(Value::String(kind)) if kind == wire.kind => {}
        Some(Value::String(kind)) => {
            return Err(ApiError::bad_request(
                format!("{at}.type"),
                format!("tools of type `{kind}` are not supported; send `{}` tools", wire.kind),
            ));
        }
        None | Some(Value::Null) if wire.kind_optional => {}
        _ => return Err(ApiError::bad_request(format!("{at}.type"), format!("is required (`{}`)", wire.kind))),
    }
    let (holder, at) = match wire.holder {
        None => (tool, at.to_owned()),
        Some(member) => match tool.get(member) {
            Some(Value::Object(holder)) => (holder, format!("{at}.{member}")),
            _ => return Err(ApiError::bad_request(format!("{at}.{member}"), "is required (an object)")),
        },
    };
    let field = |member: &str| format!("{at}.{member}");
    let name = match holder.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => return Err(ApiError::bad_request(field("name"), "is required (a string)")),
    };
    check_name(&name, &field("name"))?;
    let description = match holder.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(description)) => description.clone(),
        Some(_) => return Err(ApiError::bad_request(field("description"), "must be a string")),
    };
    let parameters_json = match holder.get(wire.schema) {
        Some(schema @ Value::Object(_)) => schema.to_string(),
        None | Some(Value::Null) if !wire.schema_required => String::new(),
        None | Some(Value::Null) => return Err(ApiError::bad_request(field(wire.schema), "is required")),
        Some(_) => return Err(ApiError::bad_request(field(wire.schema), "must be a JSON Schema object")),
    };
    // `strict` (OpenAI's structured calls) is checked and not passed on.
    bool_field(holder, "strict", &format!("{at}."))?;
    Ok(router::ClientTool { name, description, parameters_json })
}

/// `tool_choice`: one of the wire's modes, or the one tool it forces, which must be one of
/// `tools`; the mode that forces a call needs tools.
pub(crate) fn tool_choice(
    choice: Option<&Value>,
    tools: &[router::ClientTool],
    wire: &ToolWire,
) -> Result<Option<router::ToolChoice>, ApiError> {
    let mode = |name: &str| wire.modes.iter().find(|(mode, _)| *mode == name).map(|(_, mode)| *mode);
    let choice = match choice {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(name)) if wire.modes_are_strings => match mode(name) {
            Some(mode) => Choice::Mode(mode as i32),
            None => {
                return Err(ApiError::bad_request(
                    "tool_choice",
                    format!(
                        "`{name}` is not {} or a {}",
                        wire.modes.map(|(name, _)| format!("`{name}`")).join(", "),
                        wire.forced
                    ),
                ));
            }
        },
        Some(Value::Object(choice)) => object_choice(choice, tools, wire)?,
        Some(_) if wire.modes_are_strings => {
            return Err(ApiError::bad_request("tool_choice", "must be a string or an object"));
        }
        Some(_) => return Err(ApiError::bad_request("tool_choice", "must be an object")),
    };
    if let Choice::Mode(forcing) = choice
        && forcing == ToolChoiceMode::Required as i32
        && tools.is_empty()
    {
        let name = wire.modes.iter().find(|(_, mode)| *mode == ToolChoiceMode::Required).map_or("", |(name, _)| name);
        return Err(ApiError::bad_request("tool_choice", format!("`{name}` needs `tools`")));
    }
    Ok(Some(router::ToolChoice { choice: Some(choice) }))
}

fn object_choice(
    choice: &Map<String, Value>,
    tools: &[router::ClientTool],
    wire: &ToolWire,
) -> Result<Choice, ApiError> {
    let kind = choice.get("type").and_then(Value::as_str).unwrap_or_default();
    if kind == wire.forced {
        let at = format!("tool_choice.{}", wire.forced_name.join("."));
        let mut name = Some(&Value::Object(choice.clone()));
        for member in wire.forced_name {
            name = name.and_then(|value| value.get(member));
        }
        let name = name.and_then(Value::as_str).ok_or_else(|| ApiError::bad_request(&at, "is required (a string)"))?;
        if !tools.iter().any(|tool| tool.name == name) {
            return Err(ApiError::bad_request(at, format!("`{name}` is not one of the request's tools")));
        }
        return Ok(Choice::Function(name.to_owned()));
    }
    match mode_in_type(kind, wire) {
        Some(mode) => Ok(Choice::Mode(mode as i32)),
        None => {
            let mut types: Vec<&str> = Vec::new();
            if !wire.modes_are_strings {
                types.extend(wire.modes.iter().map(|(name, _)| *name));
            }
            types.push(wire.forced);
            Err(ApiError::bad_request(
                "tool_choice.type",
                format!("must be {}, not `{kind}`", quoted(types.into_iter())),
            ))
        }
    }
}

/// A mode named by an object's `type`, on the wire whose modes are objects.
fn mode_in_type(kind: &str, wire: &ToolWire) -> Option<ToolChoiceMode> {
    if wire.modes_are_strings {
        return None;
    }
    wire.modes.iter().find(|(name, _)| *name == kind).map(|(_, mode)| *mode)
}

/// `a`, `b` or `c`.
fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<String> = names.map(|name| format!("`{name}`")).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        result.unwrap_err().field().unwrap_or_default().to_owned()
    }

    #[test]
    fn each_wire_reads_its_own_shape_into_the_same_tools_and_choice() {
        let schema = json!({"type": "object"});
        let shapes = [
            (
                &CHAT_COMPLETIONS,
                json!([{"type": "function", "function": {"name": "f", "description": "d", "parameters": schema}}]),
                json!({"type": "function", "function": {"name": "f"}}),
            ),
            (
                &RESPONSES,
                json!([{"type": "function", "name": "f", "description": "d", "parameters": schema, "strict": true}]),
                json!({"type": "function", "name": "f"}),
            ),
            (
                &MESSAGES,
                json!([{"name": "f", "description": "d", "input_schema": schema}]),
                json!({"type": "tool", "name": "f"}),
            ),
        ];
        for (wire, tools, choice) in shapes {
            let tools = client_tools(Some(&tools), wire).unwrap();
            let expected =
                router::ClientTool { name: "f".into(), description: "d".into(), parameters_json: schema.to_string() };
            assert_eq!(tools, [expected]);
            let choice = tool_choice(Some(&choice), &tools, wire).unwrap().unwrap();
            assert_eq!(choice.choice, Some(Choice::Function("f".into())));
        }
        let mode =
            |value: Value, wire: &ToolWire| tool_choice(Some(&value), &[], wire).unwrap().unwrap().choice.unwrap();
        assert_eq!(mode(json!("none"), &CHAT_COMPLETIONS), Choice::Mode(ToolChoiceMode::None as i32));
        assert_eq!(mode(json!({"type": "auto"}), &MESSAGES), Choice::Mode(ToolChoiceMode::Auto as i32));
    }

    #[test]
    fn refusals_name_the_field_as_each_wire_has_it() {
        let tool = |wire: &ToolWire, tools: Value| field(client_tools(Some(&tools), wire));
        assert_eq!(
            tool(&CHAT_COMPLETIONS, json!([{"type": "function", "function": {"name": "a b"}}])),
            "tools[0].function.name"
        );
        assert_eq!(tool(&RESPONSES, json!([{"type": "function", "name": "a\u{0}b"}])), "tools[0].name");
        assert_eq!(
            tool(&MESSAGES, json!([{"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}])),
            "tools[1].name"
        );
        assert_eq!(tool(&MESSAGES, json!([{"name": "a"}])), "tools[0].input_schema");
        assert_eq!(
            tool(&RESPONSES, json!([{"type": "function", "name": "a", "parameters": [1]}])),
            "tools[0].parameters"
        );
        assert_eq!(tool(&MESSAGES, json!([{"type": "bash_20250124", "name": "bash"}])), "tools[0].type");
        let tools = client_tools(Some(&json!([{"name": "a", "input_schema": {}}])), &MESSAGES).unwrap();
        let choice =
            |wire: &ToolWire, value: Value, tools: &[router::ClientTool]| field(tool_choice(Some(&value), tools, wire));
        assert_eq!(choice(&MESSAGES, json!({"type": "tool", "name": "b"}), &tools), "tool_choice.name");
        assert_eq!(
            choice(&CHAT_COMPLETIONS, json!({"type": "function", "function": {"name": "b"}}), &tools),
            "tool_choice.function.name"
        );
        assert_eq!(choice(&MESSAGES, json!({"type": "any"}), &[]), "tool_choice");
        assert_eq!(choice(&RESPONSES, json!("required"), &[]), "tool_choice");
        assert_eq!(choice(&MESSAGES, json!("auto"), &[]), "tool_choice");
        assert_eq!(choice(&MESSAGES, json!({"type": "sometimes"}), &[]), "tool_choice.type");
        let error = tool_choice(Some(&json!({"type": "sometimes"})), &[], &MESSAGES).unwrap_err();
        assert_eq!(error.message(), "tool_choice.type: must be `auto`, `none`, `any` or `tool`, not `sometimes`");
        let error = tool_choice(Some(&json!("sometimes")), &[], &CHAT_COMPLETIONS).unwrap_err();
        assert_eq!(error.message(), "tool_choice: `sometimes` is not `auto`, `none`, `required` or a function");
    }
}
