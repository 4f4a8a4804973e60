//! Protobuf wire bytes → proto3 JSON text, read field by field against the descriptor with no
//! message decoded in between: how the REST path answers a unary RPC. Decoding the answer
//! into a `DynamicMessage` (a map of boxed values, a `String` per text field) and serialising
//! that through the generic serde path was most of the edge's work on a REST call
//! (BENCHMARKS.md, the edge against gRPC).
//!
//! The text is what [`super::message::to_json_text`] writes from the decoded message: proto
//! field names in declaration order, every field without presence shown (with its default when
//! absent), fields with presence only when set, enums by name, 64-bit integers as strings,
//! non-finite floats as strings, bytes in base64, and the well-known types in their JSON forms.
//! Map entries come in wire order (the decoded message's map has none).
//!
//! What this does not take on is [`Unhandled`], and the caller decodes a `DynamicMessage` as
//! before, so those cases answer exactly as they always did: a singular field or map key sent
//! twice (merge and last-wins rules), two members of one oneof, groups, `Any` and `FieldMask`,
//! files that are not proto3, and anything malformed or out of range (which then fails to
//! decode with the decoder's own error).

use std::io::Write;

use base64::{Engine, prelude::BASE64_STANDARD};
use prost::Message;
use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, Syntax};

/// The bytes are not something this writer answers for; decode a message instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unhandled;

/// Deeper than this is left to the decoder (prost stops at 100 levels).
const MAX_DEPTH: usize = 64;

// The ranges the JSON mapping allows (as prost-reflect checks them).
const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;
const MAX_DURATION_SECONDS: u64 = 315_576_000_000;
const MAX_DURATION_NANOS: u32 = 999_999_999;

/// Appends the JSON text of the message of type `descriptor` encoded in `bytes` to `out`. On
/// `Unhandled`, `out` holds a partial text: the caller starts again from its own length.
pub fn write_message(descriptor: &MessageDescriptor, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Unhandled> {
    message(descriptor, bytes, out, 0)
}

/// One field as the wire carries it.
#[derive(Debug, Clone, Copy)]
enum Raw<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Delimited(&'a [u8]),
}

#[derive(Debug, Clone, Copy)]
struct WireField<'a> {
    number: u32,
    raw: Raw<'a>,
}

fn message(descriptor: &MessageDescriptor, bytes: &[u8], out: &mut Vec<u8>, depth: usize) -> Result<(), Unhandled> {
    if depth > MAX_DEPTH {
        return Err(Unhandled);
    }
    if let Some(written) = well_known(descriptor.full_name(), bytes, out) {
        return written;
    }
    if descriptor.parent_file().syntax() != Syntax::Proto3 {
        return Err(Unhandled);
    }
    let present = wire_fields(bytes)?;
    out.push(b'{');
    let mut first = true;
    for field in descriptor.fields() {
        let number = field.number();
        let mut sent = present.iter().filter(|f| f.number == number);
        if field.is_map() {
            member(&field, &mut first, out);
            map(&field, sent, out, depth)?;
        } else if field.is_list() {
            member(&field, &mut first, out);
            list(&field.kind(), sent, out, depth)?;
        } else {
            let value = sent.next();
            if sent.next().is_some() {
                return Err(Unhandled);
            }
            match value {
                None if field.supports_presence() => {}
                None => {
                    member(&field, &mut first, out);
                    default_value(&field.kind(), out, depth)?;
                }
                Some(value) => {
                    if let Some(oneof) = field.containing_oneof()
                        && oneof
                            .fields()
                            .any(|other| other.number() != number && present.iter().any(|f| f.number == other.number()))
                    {
                        return Err(Unhandled);
                    }
                    member(&field, &mut first, out);
                    singular(&field.kind(), value.raw, out, depth)?;
                }
            }
        }
    }
    out.push(b'}');
    Ok(())
}

/// `"name":`, after a comma unless it is the first member.
fn member(field: &FieldDescriptor, first: &mut bool, out: &mut Vec<u8>) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    // Field names are identifiers: nothing to escape.
    out.push(b'"');
    out.extend_from_slice(field.name().as_bytes());
    out.extend_from_slice(b"\":");
}

fn list<'a>(
    kind: &Kind,
    sent: impl Iterator<Item = &'a WireField<'a>>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Unhandled> {
    out.push(b'[');
    let mut first = true;
    let mut comma = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    for field in sent {
        match (field.raw, packed_as(kind)) {
            // A packed run of numbers (or an unpacked one: parsers take both).
            (Raw::Delimited(mut run), Some(wire)) => {
                while !run.is_empty() {
                    let raw = match wire {
                        Wire::Varint => Raw::Varint(varint(&mut run)?),
                        Wire::Fixed64 => Raw::Fixed64(u64::from_le_bytes(take::<8>(&mut run)?)),
                        Wire::Fixed32 => Raw::Fixed32(u32::from_le_bytes(take::<4>(&mut run)?)),
                    };
                    comma(out);
                    singular(kind, raw, out, depth)?;
                }
            }
            (raw, _) => {
                comma(out);
                singular(kind, raw, out, depth)?;
            }
        }
    }
    out.push(b']');
    Ok(())
}

fn map<'a>(
    field: &FieldDescriptor,
    sent: impl Iterator<Item = &'a WireField<'a>>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Unhandled> {
    let Kind::Message(entry) = field.kind() else { return Err(Unhandled) };
    let (key_kind, value_kind) = (entry.map_entry_key_field().kind(), entry.map_entry_value_field().kind());
    out.push(b'{');
    // Where each key's text lies in `out`: a key sent twice (the last one wins when decoded)
    // is left to the decoder.
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for sent_entry in sent {
        let Raw::Delimited(bytes) = sent_entry.raw else { return Err(Unhandled) };
        let parts = wire_fields(bytes)?;
        let one = |number: u32| -> Result<Option<Raw<'_>>, Unhandled> {
            let mut matching = parts.iter().filter(|f| f.number == number);
            let value = matching.next().map(|f| f.raw);
            if matching.next().is_some() { Err(Unhandled) } else { Ok(value) }
        };
        let (key, value) = (one(1)?, one(2)?);
        if !keys.is_empty() {
            out.push(b',');
        }
        let start = out.len();
        map_key(&key_kind, key, out)?;
        let end = out.len();
        if keys.iter().any(|&(s, e)| out[s..e] == out[start..end]) {
            return Err(Unhandled);
        }
        keys.push((start, end));
        out.push(b':');
        match value {
            Some(raw) => singular(&value_kind, raw, out, depth)?,
            None => default_value(&value_kind, out, depth)?,
        }
    }
    out.push(b'}');
    Ok(())
}

/// A map key as a JSON string: the JSON mapping writes every key kind as text.
fn map_key(kind: &Kind, raw: Option<Raw<'_>>, out: &mut Vec<u8>) -> Result<(), Unhandled> {
    match (kind, raw) {
        (Kind::String, Some(Raw::Delimited(bytes))) => string(text(bytes)?, out),
        (Kind::String, None) => out.extend_from_slice(b"\"\""),
        (Kind::Bool, raw) => out.extend_from_slice(match raw {
            None => b"\"false\"",
            Some(Raw::Varint(v)) if v != 0 => b"\"true\"",
            Some(Raw::Varint(_)) => b"\"false\"",
            Some(_) => return Err(Unhandled),
        }),
        (
            Kind::Int32
            | Kind::Int64
            | Kind::Uint32
            | Kind::Uint64
            | Kind::Sint32
            | Kind::Sint64
            | Kind::Fixed32
            | Kind::Fixed64
            | Kind::Sfixed32
            | Kind::Sfixed64,
            raw,
        ) => match raw {
            None => out.extend_from_slice(b"\"0\""),
            Some(raw) => {
                // The number as its value would be written (64-bit ones quoted already),
                // quoted once.
                let start = out.len();
                singular(kind, raw, out, 0)?;
                if out.get(start) != Some(&b'"') {
                    out.insert(start, b'"');
                    out.push(b'"');
                }
            }
        },
        _ => return Err(Unhandled),
    }
    Ok(())
}

/// One value of a field of `kind` from the wire.
fn singular(kind: &Kind, raw: Raw<'_>, out: &mut Vec<u8>, depth: usize) -> Result<(), Unhandled> {
    match (kind, raw) {
        (Kind::Double, Raw::Fixed64(bits)) => float64(f64::from_bits(bits), out),
        (Kind::Float, Raw::Fixed32(bits)) => float32(f32::from_bits(bits), out),
        (Kind::Int64, Raw::Varint(v)) | (Kind::Sfixed64, Raw::Fixed64(v)) => quoted(v as i64, out),
        (Kind::Sint64, Raw::Varint(v)) => quoted(((v >> 1) as i64) ^ -((v & 1) as i64), out),
        (Kind::Uint64, Raw::Varint(v)) | (Kind::Fixed64, Raw::Fixed64(v)) => quoted(v, out),
        (Kind::Int32, Raw::Varint(v)) => number(v as i32, out),
        (Kind::Sint32, Raw::Varint(v)) => {
            let v = v as u32;
            number(((v >> 1) as i32) ^ -((v & 1) as i32), out);
        }
        (Kind::Sfixed32, Raw::Fixed32(v)) => number(v as i32, out),
        (Kind::Uint32, Raw::Varint(v)) => number(v as u32, out),
        (Kind::Fixed32, Raw::Fixed32(v)) => number(v, out),
        (Kind::Bool, Raw::Varint(v)) => out.extend_from_slice(if v != 0 { b"true" } else { b"false" }),
        (Kind::Enum(descriptor), Raw::Varint(v)) => enum_value(descriptor, v as i32, out),
        (Kind::String, Raw::Delimited(bytes)) => string(text(bytes)?, out),
        (Kind::Bytes, Raw::Delimited(bytes)) => base64(bytes, out),
        (Kind::Message(descriptor), Raw::Delimited(bytes)) => message(descriptor, bytes, out, depth + 1)?,
        _ => return Err(Unhandled),
    }
    Ok(())
}

/// The value of a field without presence that the wire did not carry.
fn default_value(kind: &Kind, out: &mut Vec<u8>, depth: usize) -> Result<(), Unhandled> {
    match kind {
        Kind::Double | Kind::Float => out.extend_from_slice(b"0.0"),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64 => out.extend_from_slice(b"\"0\""),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 | Kind::Uint32 | Kind::Fixed32 => out.push(b'0'),
        Kind::Bool => out.extend_from_slice(b"false"),
        Kind::String | Kind::Bytes => out.extend_from_slice(b"\"\""),
        Kind::Enum(descriptor) => enum_value(descriptor, descriptor.default_value().number(), out),
        Kind::Message(descriptor) => message(descriptor, &[], out, depth + 1)?,
    }
    Ok(())
}

fn enum_value(descriptor: &EnumDescriptor, number_value: i32, out: &mut Vec<u8>) {
    if descriptor.full_name() == "google.protobuf.NullValue" {
        out.extend_from_slice(b"null");
    } else if let Some(value) = descriptor.get_value(number_value) {
        string(value.name(), out);
    } else {
        number(number_value, out);
    }
}

/// The well-known types' JSON forms; `None` for any other message.
fn well_known(full_name: &str, bytes: &[u8], out: &mut Vec<u8>) -> Option<Result<(), Unhandled>> {
    let written = match full_name {
        "google.protobuf.Timestamp" => decode::<prost_types::Timestamp>(bytes).and_then(|t| {
            if !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&t.seconds) {
                return Err(Unhandled);
            }
            write!(out, "\"{t}\"").map_err(|_| Unhandled)
        }),
        "google.protobuf.Duration" => decode::<prost_types::Duration>(bytes).and_then(|d| {
            if d.seconds.unsigned_abs() > MAX_DURATION_SECONDS || d.nanos.unsigned_abs() > MAX_DURATION_NANOS {
                return Err(Unhandled);
            }
            write!(out, "\"{d}\"").map_err(|_| Unhandled)
        }),
        "google.protobuf.Empty" => decode::<()>(bytes).map(|()| out.extend_from_slice(b"{}")),
        "google.protobuf.DoubleValue" => decode::<f64>(bytes).map(|v| float64(v, out)),
        "google.protobuf.FloatValue" => decode::<f32>(bytes).map(|v| float32(v, out)),
        "google.protobuf.Int64Value" => decode::<i64>(bytes).map(|v| quoted(v, out)),
        "google.protobuf.UInt64Value" => decode::<u64>(bytes).map(|v| quoted(v, out)),
        "google.protobuf.Int32Value" => decode::<i32>(bytes).map(|v| number(v, out)),
        "google.protobuf.UInt32Value" => decode::<u32>(bytes).map(|v| number(v, out)),
        "google.protobuf.BoolValue" => {
            decode::<bool>(bytes).map(|v| out.extend_from_slice(if v { b"true" } else { b"false" }))
        }
        "google.protobuf.StringValue" => decode::<String>(bytes).map(|v| string(&v, out)),
        "google.protobuf.BytesValue" => decode::<Vec<u8>>(bytes).map(|v| base64(&v, out)),
        "google.protobuf.Struct" => decode::<prost_types::Struct>(bytes).and_then(|s| json_struct(&s, out)),
        "google.protobuf.Value" => decode::<prost_types::Value>(bytes).and_then(|v| json_value(&v, out)),
        "google.protobuf.ListValue" => decode::<prost_types::ListValue>(bytes).and_then(|l| json_list(&l, out)),
        "google.protobuf.Any" | "google.protobuf.FieldMask" => Err(Unhandled),
        _ => return None,
    };
    Some(written)
}

fn decode<M: Message + Default>(bytes: &[u8]) -> Result<M, Unhandled> {
    M::decode(bytes).map_err(|_| Unhandled)
}

fn json_struct(value: &prost_types::Struct, out: &mut Vec<u8>) -> Result<(), Unhandled> {
    out.push(b'{');
    for (i, (key, value)) in value.fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(key, out);
        out.push(b':');
        json_value(value, out)?;
    }
    out.push(b'}');
    Ok(())
}

fn json_list(list: &prost_types::ListValue, out: &mut Vec<u8>) -> Result<(), Unhandled> {
    out.push(b'[');
    for (i, value) in list.values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_value(value, out)?;
    }
    out.push(b']');
    Ok(())
}

fn json_value(value: &prost_types::Value, out: &mut Vec<u8>) -> Result<(), Unhandled> {
    use prost_types::value::Kind as V;
    match &value.kind {
        None | Some(V::NullValue(_)) => out.extend_from_slice(b"null"),
        Some(V::BoolValue(v)) => out.extend_from_slice(if *v { b"true" } else { b"false" }),
        // The mapping has no text for a non-finite number here: the decoder's path refuses it.
        Some(V::NumberValue(v)) if v.is_finite() => float64(*v, out),
        Some(V::NumberValue(_)) => return Err(Unhandled),
        Some(V::StringValue(v)) => string(v, out),
        Some(V::ListValue(list)) => json_list(list, out)?,
        Some(V::StructValue(value)) => json_struct(value, out)?,
    }
    Ok(())
}

// Scalars, written by serde_json exactly as the serde path writes them.

fn string(value: &str, out: &mut Vec<u8>) {
    // Writing to memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

fn number<N: serde::Serialize>(value: N, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, &value);
}

fn quoted(value: impl std::fmt::Display, out: &mut Vec<u8>) {
    let _ = write!(out, "\"{value}\"");
}

fn float64(value: f64, out: &mut Vec<u8>) {
    if value.is_finite() {
        number(value, out);
    } else {
        non_finite(value.is_nan(), value > 0.0, out);
    }
}

fn float32(value: f32, out: &mut Vec<u8>) {
    if value.is_finite() {
        number(value, out);
    } else {
        non_finite(value.is_nan(), value > 0.0, out);
    }
}

fn non_finite(nan: bool, positive: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(match (nan, positive) {
        (true, _) => b"\"NaN\"",
        (false, true) => b"\"Infinity\"",
        (false, false) => b"\"-Infinity\"",
    });
}

fn base64(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    let mut text = String::new();
    BASE64_STANDARD.encode_string(bytes, &mut text);
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

fn text(bytes: &[u8]) -> Result<&str, Unhandled> {
    std::str::from_utf8(bytes).map_err(|_| Unhandled)
}

// The wire format.

#[derive(Clone, Copy)]
enum Wire {
    Varint,
    Fixed64,
    Fixed32,
}

/// How a repeated field of `kind` is packed; `None` for kinds that never are.
fn packed_as(kind: &Kind) -> Option<Wire> {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => Some(Wire::Fixed64),
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => Some(Wire::Fixed32),
        Kind::Int32
        | Kind::Int64
        | Kind::Uint32
        | Kind::Uint64
        | Kind::Sint32
        | Kind::Sint64
        | Kind::Bool
        | Kind::Enum(_) => Some(Wire::Varint),
        Kind::String | Kind::Bytes | Kind::Message(_) => None,
    }
}

/// Every field of one message, in wire order. Groups (wire types 3 and 4) are left to the
/// decoder.
fn wire_fields(mut bytes: &[u8]) -> Result<Vec<WireField<'_>>, Unhandled> {
    let mut fields = Vec::with_capacity(16);
    while !bytes.is_empty() {
        // A key is at most 32 bits and names a field number from 1 (as the decoder insists).
        let key = u32::try_from(varint(&mut bytes)?).map_err(|_| Unhandled)?;
        let number = key >> 3;
        if number == 0 {
            return Err(Unhandled);
        }
        let raw = match key & 7 {
            0 => Raw::Varint(varint(&mut bytes)?),
            1 => Raw::Fixed64(u64::from_le_bytes(take::<8>(&mut bytes)?)),
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).map_err(|_| Unhandled)?;
                if bytes.len() < len {
                    return Err(Unhandled);
                }
                let (value, rest) = bytes.split_at(len);
                bytes = rest;
                Raw::Delimited(value)
            }
            5 => Raw::Fixed32(u32::from_le_bytes(take::<4>(&mut bytes)?)),
            _ => return Err(Unhandled),
        };
        fields.push(WireField { number, raw });
    }
    Ok(fields)
}

fn varint(bytes: &mut &[u8]) -> Result<u64, Unhandled> {
    prost::encoding::decode_varint(bytes).map_err(|_| Unhandled)
}

fn take<const N: usize>(bytes: &mut &[u8]) -> Result<[u8; N], Unhandled> {
    let (value, rest) = bytes.split_first_chunk::<N>().ok_or(Unhandled)?;
    *bytes = rest;
    Ok(*value)
}

#[cfg(test)]
mod tests {
    use prost_reflect::{DynamicMessage, MapKey, Value};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;
    use crate::transcode::{message::to_json_text, rules::RouteTable};

    /// Types this writer leaves to the decoder; the generator never sets them.
    fn left_to_the_decoder(descriptor: &MessageDescriptor) -> bool {
        matches!(descriptor.full_name(), "google.protobuf.Any" | "google.protobuf.FieldMask")
    }

    /// Random messages of one type: every kind of field, set or not, extreme and awkward values
    /// (escapes, NUL, astral characters, non-finite floats, unknown enum numbers), nested a few
    /// levels. `multi_entry_map` records whether a map got more than one entry (whose order the
    /// decoded message does not keep).
    struct Generator {
        rng: StdRng,
        pool: prost_reflect::DescriptorPool,
        multi_entry_map: bool,
    }

    impl Generator {
        fn new(seed: u64) -> Self {
            let pool = RouteTable::switchyard().expect("route table").pool().clone();
            Self { rng: StdRng::seed_from_u64(seed), pool, multi_entry_map: false }
        }

        /// A well-known type's message as a dynamic one.
        fn dynamic(&self, name: &str, message: &impl Message) -> DynamicMessage {
            let descriptor = self.pool.get_message_by_name(name).expect("a well-known type in the pool");
            DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice()).expect("decodes")
        }

        fn message(&mut self, descriptor: &MessageDescriptor, depth: usize) -> DynamicMessage {
            let mut message = DynamicMessage::new(descriptor.clone());
            match descriptor.full_name() {
                "google.protobuf.Timestamp" => {
                    let seconds = self.rng.random_range(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS);
                    let nanos = self.rng.random_range(0..1_000_000_000);
                    return self.dynamic("google.protobuf.Timestamp", &prost_types::Timestamp { seconds, nanos });
                }
                "google.protobuf.Duration" => {
                    let seconds = self.rng.random_range(-315_576_000_000..=315_576_000_000_i64);
                    let nanos = self.rng.random_range(0..1_000_000_000) * if seconds < 0 { -1 } else { 1 };
                    return self.dynamic("google.protobuf.Duration", &prost_types::Duration { seconds, nanos });
                }
                "google.protobuf.Struct" => {
                    let value = self.json_struct(depth);
                    return self.dynamic("google.protobuf.Struct", &value);
                }
                "google.protobuf.Value" => {
                    let value = self.json_value(depth);
                    return self.dynamic("google.protobuf.Value", &value);
                }
                "google.protobuf.ListValue" => {
                    let value = prost_types::ListValue { values: vec![self.json_value(depth), self.json_value(depth)] };
                    return self.dynamic("google.protobuf.ListValue", &value);
                }
                _ => {}
            }
            for field in descriptor.fields() {
                if self.rng.random_bool(0.3) {
                    continue;
                }
                if let Kind::Message(inner) = field.kind()
                    && (left_to_the_decoder(&inner) || (depth > 3 && !field.is_list() && !field.is_map()))
                {
                    continue;
                }
                let value = if field.is_map() {
                    let Kind::Message(entry) = field.kind() else { unreachable!("a map field is a message") };
                    let (key, value) = (entry.map_entry_key_field(), entry.map_entry_value_field());
                    let entries = if depth > 3 { 0 } else { self.rng.random_range(0..4) };
                    self.multi_entry_map |= entries > 1;
                    let mut map = std::collections::HashMap::new();
                    for _ in 0..entries {
                        let key = match self.singular(&key.kind(), depth) {
                            Value::String(s) => MapKey::String(s),
                            Value::Bool(b) => MapKey::Bool(b),
                            Value::I32(v) => MapKey::I32(v),
                            Value::I64(v) => MapKey::I64(v),
                            Value::U32(v) => MapKey::U32(v),
                            Value::U64(v) => MapKey::U64(v),
                            other => panic!("not a map key: {other:?}"),
                        };
                        map.insert(key, self.singular(&value.kind(), depth + 1));
                    }
                    Value::Map(map)
                } else if field.is_list() {
                    let items = if depth > 3 { 0 } else { self.rng.random_range(0..4) };
                    Value::List((0..items).map(|_| self.singular(&field.kind(), depth + 1)).collect())
                } else {
                    self.singular(&field.kind(), depth + 1)
                };
                message.set_field(&field, value);
            }
            message
        }

        fn singular(&mut self, kind: &Kind, depth: usize) -> Value {
            let rng = &mut self.rng;
            let pick = rng.random_range(0..4);
            match kind {
                Kind::Double => Value::F64(match pick {
                    0 => [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0][rng.random_range(0..5)],
                    1 => f64::from_bits(rng.random()),
                    _ => rng.random_range(-1e6..1e6),
                }),
                Kind::Float => Value::F32(match pick {
                    0 => [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0][rng.random_range(0..4)],
                    1 => f32::from_bits(rng.random()),
                    _ => rng.random_range(-1e3..1e3),
                }),
                Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(if pick == 0 {
                    [i32::MIN, -1, 0, i32::MAX][rng.random_range(0..4)]
                } else {
                    rng.random()
                }),
                Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(if pick == 0 {
                    [i64::MIN, -1, 0, i64::MAX][rng.random_range(0..4)]
                } else {
                    rng.random()
                }),
                Kind::Uint32 | Kind::Fixed32 => Value::U32(if pick == 0 { u32::MAX } else { rng.random() }),
                Kind::Uint64 | Kind::Fixed64 => Value::U64(if pick == 0 { u64::MAX } else { rng.random() }),
                Kind::Bool => Value::Bool(rng.random()),
                Kind::String => Value::String(self.text()),
                Kind::Bytes => {
                    Value::Bytes((0..self.rng.random_range(0..9)).map(|_| self.rng.random::<u8>()).collect())
                }
                Kind::Enum(descriptor) => {
                    let known: Vec<i32> = descriptor.values().map(|v| v.number()).collect();
                    // Sometimes a number the enum does not name (an answer from a newer service).
                    Value::EnumNumber(if pick == 0 { 99 } else { known[rng.random_range(0..known.len())] })
                }
                Kind::Message(descriptor) => Value::Message(self.message(descriptor, depth)),
            }
        }

        fn text(&mut self) -> String {
            const PIECES: [&str; 9] = ["a", "tech-expert", "\"", "\\", "\n", "\u{0}", "é", "𝄞", "</script>"];
            (0..self.rng.random_range(0..6)).map(|_| PIECES[self.rng.random_range(0..PIECES.len())]).collect()
        }

        fn json_struct(&mut self, depth: usize) -> prost_types::Struct {
            let mut fields = std::collections::BTreeMap::new();
            for _ in 0..self.rng.random_range(0..4) {
                fields.insert(self.text(), self.json_value(depth + 1));
            }
            prost_types::Struct { fields }
        }

        fn json_value(&mut self, depth: usize) -> prost_types::Value {
            use prost_types::value::Kind as V;
            let kind = match self.rng.random_range(0..if depth > 3 { 4 } else { 6 }) {
                0 => V::NullValue(0),
                1 => V::BoolValue(self.rng.random()),
                2 => V::NumberValue(self.rng.random_range(-1e9..1e9)),
                3 => V::StringValue(self.text()),
                4 => V::ListValue(prost_types::ListValue {
                    values: (0..self.rng.random_range(0..3)).map(|_| self.json_value(depth + 1)).collect(),
                }),
                _ => V::StructValue(self.json_struct(depth + 1)),
            };
            prost_types::Value { kind: Some(kind) }
        }
    }

    fn written(descriptor: &MessageDescriptor, bytes: &[u8]) -> Result<Vec<u8>, Unhandled> {
        let mut out = Vec::new();
        write_message(descriptor, bytes, &mut out).map(|()| out)
    }

    /// Every message type the services speak, a few hundred random messages each: the text
    /// written from the wire says what the decoded message's text says, and is that very text
    /// (member order included) when no map has two entries.
    #[test]
    fn the_wire_text_is_the_decoded_messages_text() {
        let table = RouteTable::switchyard().expect("route table");
        let mut generator = Generator::new(7);
        let mut checked = 0;
        for descriptor in table.pool().all_messages() {
            if descriptor.is_map_entry()
                || left_to_the_decoder(&descriptor)
                || descriptor.parent_file().syntax() != Syntax::Proto3
            {
                continue;
            }
            for _ in 0..200 {
                generator.multi_entry_map = false;
                let message = generator.message(&descriptor, 0);
                let bytes = message.encode_to_vec();
                let decoded = DynamicMessage::decode(descriptor.clone(), bytes.as_slice()).expect("decodes");
                let expected = to_json_text(&decoded);
                let ours = written(&descriptor, &bytes)
                    .unwrap_or_else(|_| panic!("{} left to the decoder: {message:?}", descriptor.full_name()));
                let (ours_value, expected_value): (serde_json::Value, serde_json::Value) = (
                    serde_json::from_slice(&ours).expect("our text is JSON"),
                    serde_json::from_slice(&expected).expect("the decoder's text is JSON"),
                );
                assert_eq!(ours_value, expected_value, "{}", descriptor.full_name());
                if !generator.multi_entry_map {
                    assert_eq!(
                        String::from_utf8_lossy(&ours),
                        String::from_utf8_lossy(&expected),
                        "{}",
                        descriptor.full_name()
                    );
                }
                checked += 1;
            }
        }
        assert!(checked > 10_000, "only {checked} messages checked");
    }

    /// Hostile bytes — valid encodings with bytes changed, cut short or grown, and noise — never
    /// panic, and whatever the writer does answer, the decoder accepts and writes the same.
    #[test]
    fn broken_bytes_are_left_to_the_decoder_or_written_as_it_would() {
        let table = RouteTable::switchyard().expect("route table");
        let mut generator = Generator::new(11);
        let (mut written_count, mut left) = (0, 0);
        for descriptor in table.pool().all_messages() {
            if descriptor.is_map_entry() || left_to_the_decoder(&descriptor) {
                continue;
            }
            for round in 0..100 {
                let mut bytes = generator.message(&descriptor, 0).encode_to_vec();
                let rng = &mut generator.rng;
                match round % 4 {
                    0 if !bytes.is_empty() => {
                        let at = rng.random_range(0..bytes.len());
                        bytes[at] = rng.random();
                    }
                    1 if !bytes.is_empty() => bytes.truncate(rng.random_range(0..bytes.len())),
                    2 => bytes.extend((0..rng.random_range(1..6)).map(|_| rng.random::<u8>())),
                    _ => bytes = (0..rng.random_range(0..40)).map(|_| rng.random::<u8>()).collect(),
                }
                let decoded = DynamicMessage::decode(descriptor.clone(), bytes.as_slice());
                match written(&descriptor, &bytes) {
                    Ok(ours) => {
                        let decoded = decoded.unwrap_or_else(|err| {
                            panic!("{}: written, but the decoder refuses it ({err}): {bytes:?}", descriptor.full_name())
                        });
                        let ours: serde_json::Value = serde_json::from_slice(&ours).expect("our text is JSON");
                        let expected: serde_json::Value =
                            serde_json::from_slice(&to_json_text(&decoded)).expect("JSON");
                        assert_eq!(ours, expected, "{}: {bytes:?}", descriptor.full_name());
                        written_count += 1;
                    }
                    Err(Unhandled) => left += 1,
                }
            }
        }
        assert!(written_count > 1_000 && left > 1_000, "written {written_count}, left {left}");
    }

    /// What the writer leaves to the decoder still answers the decoder's text: a field mask,
    /// a field sent twice (the last wins), and two members of one oneof.
    #[test]
    fn what_is_left_to_the_decoder_answers_as_before() {
        use switchyard_proto::sessions::v1 as sessions;
        let table = RouteTable::switchyard().expect("route table");
        let check = |name: &str, bytes: &[u8]| {
            let descriptor = table.pool().get_message_by_name(name).expect("message");
            assert_eq!(written(&descriptor, bytes), Err(Unhandled), "{name}");
            let decoded = DynamicMessage::decode(descriptor.clone(), bytes).expect("decodes");
            let text = crate::transcode::message::wire_to_json_text(&descriptor, bytes).expect("answers");
            assert_eq!(text, to_json_text(&decoded), "{name}");
        };
        let update = sessions::UpdateRoleRequest {
            update_mask: Some(prost_types::FieldMask { paths: vec!["name".into()] }),
            ..Default::default()
        };
        check("switchyard.sessions.v1.UpdateRoleRequest", &update.encode_to_vec());
        let mut twice =
            sessions::CreateSessionRequest { initial_role_id: "a".into(), ..Default::default() }.encode_to_vec();
        twice.extend(
            sessions::CreateSessionRequest { initial_role_id: "b".into(), ..Default::default() }.encode_to_vec(),
        );
        check("switchyard.sessions.v1.CreateSessionRequest", &twice);
        let descriptor = table.pool().get_message_by_name("switchyard.router.v1.ChatStreamResponse").expect("message");
        let oneof = descriptor.oneofs().find(|o| !o.is_synthetic()).expect("a oneof");
        let members: Vec<_> = oneof.fields().take(2).collect();
        let mut both = Vec::new();
        for member in &members {
            let mut one = DynamicMessage::new(descriptor.clone());
            let Kind::Message(inner) = member.kind() else { panic!("message members") };
            one.set_field(member, Value::Message(DynamicMessage::new(inner)));
            both.extend(one.encode_to_vec());
        }
        check("switchyard.router.v1.ChatStreamResponse", &both);
    }
}
