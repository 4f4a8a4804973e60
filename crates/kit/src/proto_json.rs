//! JSON objects as `google.protobuf.Struct` and back: MCP tool schemas and arguments cross
//! gRPC as Structs (the gateway serves them, the router's agent sends them).

use prost_types::{Struct, Value as ProtoValue, value::Kind};
use serde_json::{Map, Number, Value};

/// A JSON object as a Struct.
pub fn to_struct(map: &Map<String, Value>) -> Struct {
    Struct { fields: map.iter().map(|(k, v)| (k.clone(), to_proto(v))).collect() }
}

fn to_proto(value: &Value) -> ProtoValue {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue { values: items.iter().map(to_proto).collect() }),
        Value::Object(map) => Kind::StructValue(to_struct(map)),
    };
    ProtoValue { kind: Some(kind) }
}

/// A Struct as a JSON object.
pub fn from_struct(value: &Struct) -> Map<String, Value> {
    value.fields.iter().map(|(k, v)| (k.clone(), from_proto(v))).collect()
}

/// Protobuf has one number type (double); whole numbers go back to JSON integers, so a tool
/// whose schema says `integer` accepts them.
fn from_proto(value: &ProtoValue) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                Value::Number(Number::from(*n as i64))
            } else {
                Number::from_f64(*n).map_or(Value::Null, Value::Number)
            }
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(from_proto).collect()),
        Some(Kind::StructValue(s)) => Value::Object(from_struct(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_through_struct() {
        let json = serde_json::json!({"a": 1, "b": 2.5, "c": [true, null, "x"], "d": {"e": -3}});
        let Value::Object(map) = &json else { panic!("an object") };
        assert_eq!(Value::Object(from_struct(&to_struct(map))), json);
    }
}
