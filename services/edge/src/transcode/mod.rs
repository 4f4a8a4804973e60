//! HTTP/JSON ↔ gRPC from the descriptor set: `rules` reads each RPC's `google.api.http`
//! option into a route, `template` matches paths, `message` builds request messages from JSON,
//! path and query, and writes responses as JSON; `wire_json` writes a unary answer's JSON straight
//! from its wire bytes.
//!
//! Built on `prost-reflect` (dynamic messages and the proto3 JSON mapping) under this thin
//! layer rather than a transcoding crate: the maintained ones are Envoy's C++ filter and
//! grpc-gateway's Go code generator; the Rust crates found target other prost versions or
//! generate code per service. Reading the descriptors at start keeps one binary for any proto
//! change and lets the OpenAPI document come from the same table.

pub mod message;
pub mod rules;
pub mod template;
pub mod wire_json;
