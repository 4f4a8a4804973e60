//! The service kit: what every Switchyard service is built from — configuration flags,
//! telemetry with W3C trace propagation and Prometheus metrics (`metrics_export`), the gRPC
//! server (health, reflection, admission control, identity, rate, errors and latency per method,
//! graceful shutdown, each failure logged once where it was decided, with the request id carried
//! across services), the HTTP listener (deadlines for slow and idle clients, a connection cap),
//! client channels, the shared error codes, caller identity (tenant, user, session keys), store
//! plumbing (Redis, Postgres schemas, day-partitioned record tables, store flags, secrets), the
//! record buffer that writes Postgres records off the request path, backoff, wire timestamps,
//! the rule for text Postgres refuses (NUL), fault logs bounded while a fault repeats (`log`),
//! freed heap handed back to the OS (`heap`), and the status a caller sees when an upstream's
//! connection breaks (`status`).

pub mod backoff;
pub mod call_outcome;
pub mod client;
pub mod config;
pub mod error;
pub mod failures;
pub mod health;
pub mod heap;
pub mod http_server;
pub mod identity;
pub mod in_process;
pub mod json_depth;
pub mod log;
pub mod metrics_export;
pub mod partitions;
pub mod postgres;
pub mod proto_json;
pub mod proto_time;
pub mod records;
pub mod role_id;
pub mod rpc_metrics;
pub mod secret;
pub mod server;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tls;

pub use config::{ServerArgs, TelemetryArgs};
pub use error::{ErrorCode, ServiceError, to_status};
pub use identity::{FieldError, Identity, SessionId, SessionKey, TenantId, UserId};
pub use role_id::RoleId;
pub use secret::Secret;
pub use server::{GrpcServer, ShutdownNotice, shutdown_signal};
