//! Property-based fuzzing of the edge's HTTP/JSON → gRPC transcoding, in process: for every
//! route of Switchyard's protos, paths with hostile variables, query strings with hostile keys,
//! values and percent-escapes, and JSON bodies that name the request's real fields with hostile
//! values (wrong types, huge numbers, deep nesting, NUL). No panic; a request message or a 400
//! naming its field; each case within the budget. Responses go back to JSON whatever they hold.

use std::sync::LazyLock;

use http::Method;
use proptest::{prelude::*, sample::Index};
use switchyard_edge::transcode::{
    message::{request, to_json},
    rules::{Lookup, RouteTable},
};
use switchyard_testkit::fuzz::{config, hostile_text, json_leaf, json_value, timed};

static TABLE: LazyLock<RouteTable> = LazyLock::new(|| RouteTable::switchyard().expect("the route table builds"));

/// A path segment or query part: plain words, hostile text raw, or percent-encoded bytes
/// (broken escapes and invalid UTF-8 included).
fn url_text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => "[a-z0-9_.-]{1,12}",
        1 => hostile_text().prop_map(|text| text.replace(['/', '?', '#', '&', '='], "")),
        1 => proptest::collection::vec(any::<u8>(), 1..12)
            .prop_map(|bytes| bytes.iter().map(|byte| format!("%{byte:02X}")).collect()),
        1 => prop_oneof![Just("%"), Just("%4"), Just("%zz"), Just("%+f"), Just("%C3"), Just("+"), Just("%00")]
            .prop_map(str::to_owned),
    ]
    .boxed()
}

/// A member name: one of the input message's fields (picked later by index), or hostile.
#[derive(Debug, Clone)]
enum Key {
    Field(Index),
    Nested(Index, Index),
    Other(String),
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        4 => any::<Index>().prop_map(Key::Field),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Key::Nested(a, b)),
        1 => hostile_text().prop_map(Key::Other),
    ]
}

/// The key's text for `message` (proto or JSON names, dotted for a nested field).
fn key_text(key: &Key, message: &prost_reflect::MessageDescriptor) -> String {
    let fields: Vec<_> = message.fields().collect();
    let pick = |index: &Index, fields: &[prost_reflect::FieldDescriptor]| {
        (!fields.is_empty()).then(|| fields[index.index(fields.len())].clone())
    };
    match key {
        Key::Field(index) => pick(index, &fields).map_or_else(String::new, |field| field.name().to_owned()),
        Key::Nested(outer, inner) => match pick(outer, &fields) {
            Some(field) => match field.kind() {
                prost_reflect::Kind::Message(nested) => {
                    let nested: Vec<_> = nested.fields().collect();
                    let inner = pick(inner, &nested).map_or_else(String::new, |f| f.json_name().to_owned());
                    format!("{}.{inner}", field.json_name())
                }
                _ => field.json_name().to_owned(),
            },
            None => String::new(),
        },
        Key::Other(text) => text.clone(),
    }
}

#[derive(Debug, Clone)]
struct Case {
    route: Index,
    /// Replaces the route's variables, in order; `None` keeps the path as the template says.
    segments: Option<Vec<String>>,
    /// A whole path instead of the route's.
    raw_path: Option<String>,
    query: Vec<(Key, String)>,
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    Members(Vec<(Key, String)>),
    Json(String),
    Bytes(Vec<u8>),
}

fn case() -> impl Strategy<Value = Case> {
    let body = prop_oneof![
        4 => proptest::collection::vec((key(), prop_oneof![json_leaf(), json_value()]), 0..6).prop_map(Body::Members),
        1 => prop_oneof![json_value(), Just(String::new()), Just("{}".to_owned())].prop_map(Body::Json),
        1 => proptest::collection::vec(any::<u8>(), 0..128).prop_map(Body::Bytes),
    ];
    (
        any::<Index>(),
        proptest::option::weighted(0.8, proptest::collection::vec(url_text(), 0..4)),
        proptest::option::weighted(0.1, prop_oneof!["/[a-z/{}:%.*]{0,40}", hostile_text()]),
        proptest::collection::vec((key(), url_text()), 0..5),
        body,
    )
        .prop_map(|(route, segments, raw_path, query, body)| Case { route, segments, raw_path, query, body })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_request_transcodes_or_is_refused_by_field(case in case()) {
        let table = &*TABLE;
        let route = &table.routes()[case.route.index(table.routes().len())];
        let input = route.rpc.method.input();
        let path = match (&case.raw_path, &case.segments) {
            (Some(raw), _) => raw.clone(),
            (None, segments) => {
                let mut values = segments.clone().unwrap_or_default().into_iter();
                let template = route.template.as_str();
                let mut path = String::new();
                let mut rest = template;
                while let Some(open) = rest.find('{') {
                    let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
                    path.push_str(&rest[..open]);
                    path.push_str(&values.next().unwrap_or_else(|| "x".to_owned()));
                    rest = &rest[close..];
                }
                path.push_str(rest);
                path
            }
        };
        let query: Vec<String> =
            case.query.iter().map(|(key, value)| format!("{}={value}", key_text(key, &input))).collect();
        let query = query.join("&");
        let body = match &case.body {
            Body::Members(members) => {
                let members: Vec<String> = members
                    .iter()
                    .map(|(key, value)| format!("{}:{value}", serde_json::Value::String(key_text(key, &input))))
                    .collect();
                format!("{{{}}}", members.join(",")).into_bytes()
            }
            Body::Json(json) => json.clone().into_bytes(),
            Body::Bytes(bytes) => bytes.clone(),
        };
        timed("transcoding a request", || -> Result<(), TestCaseError> {
            let Lookup::Found(found, bindings) = table.find(&route.method, &path) else { return Ok(()) };
            match request(found, &body, &bindings, Some(&query)) {
                Ok(message) => {
                    // What the service would answer with the same message type goes back to JSON.
                    let json = to_json(&message);
                    prop_assert!(json.is_object());
                }
                Err(error) => {
                    prop_assert_eq!(error.status(), 400, "{:?}", error);
                    prop_assert!(error.field().is_some_and(|field| !field.is_empty()), "{:?}", error);
                }
            }
            Ok(())
        })?;
    }

    /// Any method and path: a route, 405 or 404 from the table, never a panic.
    #[test]
    fn any_path_is_found_or_not(
        method in prop_oneof![Just(Method::GET), Just(Method::POST), Just(Method::PATCH), Just(Method::DELETE), Just(Method::PUT)],
        path in prop_oneof!["/api/[a-z/{}:%._*-]{0,60}", hostile_text(), url_text().prop_map(|text| format!("/api/context/sessions/{text}"))],
    ) {
        timed("finding a route", || match TABLE.find(&method, &path) {
            Lookup::Found(route, bindings) => assert!(route.template.matches(&path) == Some(bindings)),
            Lookup::MethodNotAllowed(allowed) => assert!(!allowed.is_empty() && !allowed.contains(&method)),
            Lookup::NotFound => {}
        });
    }
}
