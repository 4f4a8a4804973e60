//! The service kit: what every Switchyard service is built from — configuration flags,
//! telemetry with W3C trace propagation, the gRPC server (health, reflection, admission
//! control, graceful shutdown), client channels, and the shared error codes.

pub mod client;
pub mod config;
pub mod error;
pub mod health;
pub mod postgres;
pub mod role_id;
pub mod server;
pub mod telemetry;

pub use config::{ServerArgs, TelemetryArgs};
pub use error::{ErrorCode, ServiceError, to_status};
pub use role_id::RoleId;
pub use server::{GrpcServer, shutdown_signal};
