//! The end of the edge's shutdown grace for the requests still in progress. The notice
//! ([`switchyard_kit::ShutdownNotice`]) is cut a little before the grace ends, while the
//! connections are still up: a request not yet answered then gets a 503 with the usual JSON
//! error, rather than its connection closed with no response as the process exits; a stream
//! already under way ends with one error event ([`crate::rest::client_stream`]).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::{Edge, error::ApiError};

/// What a client is told when the edge ends its request or stream at shutdown.
pub const EDGE_SHUTTING_DOWN: &str = "the edge is shutting down; retry the request";

/// Races the request's handler against the notice's cut. The handler is polled first, so an
/// answer ready at the cut is sent as it is; a streamed response has its head by then and is
/// not touched here. Logged and counted by the layers outside, as every error answered.
pub async fn answer_at_the_cut(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    tokio::select! {
        biased;
        response = next.run(request) => response,
        () = edge.shutdown.cut() => ApiError::shutting_down().into_response(),
    }
}
