//! Property-based fuzzing of what MCP clients and servers send the gateway, in process:
//! JSON-RPC messages from clients (as the transport reads them), messages from servers (tool
//! lists with hostile names and schemas, then named by the gateway), and the servers file in
//! TOML and JSON. No panic; a value or an error naming where; each case within the budget.

use proptest::prelude::*;
use rmcp::model::{ClientJsonRpcMessage, RequestMetaObject, ServerJsonRpcMessage};
use switchyard_kit::identity::{Identity, TenantId, UserId};
use switchyard_mcp_gateway::{
    guard::{Origins, parse_allowed_origin},
    naming::{self, MAX_NAME},
    scope::{CONTEXT_META, stateless},
    upstream::config::parse_contents,
};
use switchyard_testkit::fuzz::{
    array, config, hostile_text, json_leaf, json_number, json_string, json_value, member, object, one_of, timed,
};

fn id() -> BoxedStrategy<String> {
    prop_oneof![json_number(), json_string(), Just("null".to_owned())].boxed()
}

/// A JSON-RPC message from a client: requests and notifications of every MCP method, with
/// hostile params, ids and envelopes.
fn client_message() -> BoxedStrategy<String> {
    let methods = &[
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/roots/list_changed",
        "unknown/method",
    ];
    let params = object(vec![
        member("name", one_of(&["files__read_file", "set_context", "find_tools"])),
        member("arguments", json_value()),
        member("uri", one_of(&["file:///etc/passwd", "switchyard://context"])),
        member("cursor", json_string()),
        member("protocolVersion", one_of(&["2025-06-18", "2024-11-05", "1999-01-01"])),
        member("capabilities", json_value()),
        member("clientInfo", object(vec![member("name", json_string()), member("version", json_string())])),
        member("requestId", id()),
        member("level", one_of(&["debug", "emergency", "loud"])),
        member("_meta", json_value()),
    ]);
    object(vec![
        member("jsonrpc", one_of(&["2.0", "1.0"])),
        member("id", id()),
        member("method", one_of(methods)),
        member("params", params),
    ])
}

fn tool() -> BoxedStrategy<String> {
    object(vec![
        member("name", prop_oneof![one_of(&["read_file", "a/b", ""]), "\"[a-z_]{60,90}\"".boxed()].boxed()),
        member("description", json_string()),
        member("inputSchema", prop_oneof![Just(r#"{"type":"object"}"#.to_owned()), json_value()].boxed()),
        member("outputSchema", json_value()),
        member("annotations", json_value()),
    ])
}

/// A JSON-RPC message from a server: results (tool lists, call results), errors, requests.
fn server_message() -> BoxedStrategy<String> {
    let content = object(vec![
        member("type", one_of(&["text", "image", "resource", "audio", "resource_link"])),
        member("text", json_string()),
        member("data", json_string()),
        member("mimeType", json_string()),
    ]);
    let result = object(vec![
        member("tools", array(tool(), 6)),
        member("nextCursor", json_string()),
        member("content", array(content, 3)),
        member("isError", json_leaf()),
        member("structuredContent", json_value()),
        member("protocolVersion", one_of(&["2025-06-18"])),
        member("capabilities", json_value()),
        member("serverInfo", object(vec![member("name", json_string()), member("version", json_string())])),
    ]);
    let error =
        object(vec![member("code", json_number()), member("message", json_string()), member("data", json_value())]);
    object(vec![
        member("jsonrpc", one_of(&["2.0"])),
        member("id", id()),
        member("result", result),
        member("error", error),
        member("method", one_of(&["notifications/tools/list_changed", "sampling/createMessage", "roots/list"])),
        member("params", json_value()),
    ])
}

/// A TOML string (basic) holding `text`.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn value_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop_oneof![Just("npx"), Just("http://127.0.0.1:9/mcp"), Just("https://example.com/mcp"), Just("${TOKEN}"), Just("${"), Just("${NOPE}"), Just("ftp://x")].prop_map(str::to_owned),
        2 => hostile_text(),
    ]
    .boxed()
}

/// A servers file in TOML: servers with hostile names and values, and policies.
fn servers_toml() -> BoxedStrategy<String> {
    let keys = &["command", "url", "cwd", "type", "args", "env", "headers", "oauth", "unknown"];
    let entry =
        (proptest::sample::select(keys), value_text(), hostile_text()).prop_map(|(key, value, name)| match key {
            "args" => format!("args = [{}]", toml_string(&value)),
            "env" | "headers" => format!("{key} = {{ {} = {} }}", toml_string(&name), toml_string(&value)),
            "oauth" => format!(
                "oauth = {{ token_url = {}, client_id = \"c\", client_secret = {{ env = \"TOKEN\" }} }}",
                toml_string(&value)
            ),
            _ => format!("{key} = {}", toml_string(&value)),
        });
    let server = (prop_oneof!["[a-z0-9_-]{1,12}", hostile_text()], proptest::collection::vec(entry, 0..5))
        .prop_map(|(name, entries)| format!("[servers.{}]\n{}\n", toml_string(&name), entries.join("\n")));
    let policy = (
        value_text(),
        value_text(),
        prop_oneof![Just("allow_tools"), Just("deny_servers"), Just("pin"), Just("tenants"), Just("bogus")],
    )
        .prop_map(|(name, glob, key)| {
            format!("[[policies]]\nname = {}\n{key} = [{}]\n", toml_string(&name), toml_string(&glob))
        });
    (proptest::collection::vec(server, 0..4), proptest::collection::vec(policy, 0..2))
        .prop_map(|(servers, policies)| format!("{}{}", servers.concat(), policies.concat()))
        .boxed()
}

/// The same in JSON (the desktop clients' `mcpServers` form).
fn servers_json() -> BoxedStrategy<String> {
    let server = object(vec![
        member("command", value_text().prop_map(|t| serde_json::Value::String(t).to_string()).boxed()),
        member("url", value_text().prop_map(|t| serde_json::Value::String(t).to_string()).boxed()),
        member("args", array(json_string(), 3)),
        member("env", json_value()),
        member("headers", json_value()),
        member("type", one_of(&["stdio", "http", "streamable-http", "sse"])),
    ]);
    let servers = proptest::collection::vec((json_string(), server), 0..4).prop_map(|servers| {
        let members: Vec<String> = servers.into_iter().map(|(name, server)| format!("{name}:{server}")).collect();
        format!("{{{}}}", members.join(","))
    });
    object(vec![member("mcpServers", servers.boxed()), member("policies", json_value())])
}

fn lookup(name: &str) -> Option<String> {
    (name == "TOKEN").then(|| "s3cret".to_owned())
}

proptest! {
    #![proptest_config(config(256))]

    /// What a client sends reads as a JSON-RPC message or is refused, and the origin check
    /// takes any `Origin` text.
    #[test]
    fn any_client_message_reads_or_is_refused(message in prop_oneof![4 => client_message(), 1 => hostile_text()], origin in hostile_text()) {
        timed("reading a client message", || {
            let _ = serde_json::from_str::<ClientJsonRpcMessage>(&message);
            let _ = parse_allowed_origin(&origin);
            let _ = Origins::new(std::slice::from_ref(&origin));
        });
    }

    /// What a server sends reads or is refused; the tools it lists, whatever their names, get
    /// valid, unique gateway names.
    #[test]
    fn any_server_message_reads_and_its_tools_get_valid_names(
        message in server_message(),
        servers in proptest::collection::vec(prop_oneof!["[a-z]{1,8}", hostile_text()], 1..3),
        prefix in any::<bool>(),
    ) {
        timed("reading a server message", || serde_json::from_str::<ServerJsonRpcMessage>(&message).is_ok());
        let value: serde_json::Value = serde_json::from_str(&message).unwrap_or_default();
        let tools: Vec<String> = value["result"]["tools"]
            .as_array()
            .map(|tools| tools.iter().filter_map(|tool| tool["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let pairs: Vec<(&str, &str)> =
            servers.iter().flat_map(|server| tools.iter().map(move |tool| (server.as_str(), tool.as_str()))).collect();
        let (names, _) = timed("naming tools", || naming::assign(&pairs, prefix));
        prop_assert_eq!(names.len(), pairs.len());
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        prop_assert_eq!(unique.len(), names.len(), "{:?}", names);
        for name in &names {
            prop_assert!(naming::is_valid(name) && name.len() <= MAX_NAME, "`{}`", name);
            prop_assert_ne!(name.as_str(), naming::SET_CONTEXT);
        }
    }

    /// A servers file, TOML or JSON: servers and policies, or an error that names the file.
    #[test]
    fn any_servers_file_parses_or_names_the_file(
        (text, json) in prop_oneof![servers_toml().prop_map(|t| (t, false)), servers_json().prop_map(|t| (t, true)), hostile_text().prop_map(|t| (t, false))],
    ) {
        match timed("reading a servers file", || parse_contents("servers.toml", &text, json, &lookup)) {
            Ok(contents) => {
                for server in &contents.servers {
                    prop_assert!(!server.name.is_empty());
                }
            }
            Err(error) => prop_assert!(error.to_string().starts_with("servers.toml: "), "{}", error),
        }
    }

    /// A stateless call's context handle in `_meta`, of any JSON, from any user: its scope, or
    /// an invalid-params error naming the `_meta` field.
    #[test]
    fn any_context_handle_is_a_scope_or_refused_naming_the_field(
        handle in prop_oneof![
            hostile_text().prop_map(|text| serde_json::Value::String(format!("ctx-{text}"))),
            hostile_text().prop_map(serde_json::Value::String),
            json_value().prop_map(|json| serde_json::from_str(&json).unwrap_or_default()),
        ],
        user in proptest::option::of(prop_oneof!["[a-z@.:+-]{1,20}", hostile_text()]),
    ) {
        let identity = Identity {
            tenant: TenantId::parse("acme").expect("a tenant"),
            user: user.and_then(|user| UserId::parse(&user).ok()),
            admin: false,
        };
        let mut meta = RequestMetaObject::default();
        meta.insert(CONTEXT_META.to_owned(), handle);
        if let Err(error) = timed("reading a context handle", || stateless(&identity, &meta)) {
            prop_assert!(error.message.contains(CONTEXT_META), "{}", error.message);
        }
    }
}
