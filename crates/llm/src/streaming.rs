//! Turns a vendor's Server-Sent Events body into [`StreamEvent`]s: reads network chunks with an
//! idle timeout, frames them into SSE events, and hands each to the vendor's [`Decoder`], which
//! assembles text and tool calls and says when the answer is complete.

use std::{collections::VecDeque, time::Duration};

use bytes::Bytes;
use futures::{StreamExt, stream::BoxStream};

use crate::{
    Completion, ErrorKind, EventStream, ProviderConfig, ProviderError, StreamEvent,
    sse::{SseEvent, SseParser},
    transport::redact,
};

/// How long, after the answer is complete, the rest of the body (its chunked-encoding end) may
/// take to arrive: reading it lets the connection go back to the pool.
const DRAIN_WAIT: Duration = Duration::from_millis(250);

/// One vendor's stream format.
pub trait Decoder: Send + 'static {
    /// Takes one SSE event, queueing what it yields on `out`; `Ok(true)` once the vendor's end
    /// marker has come and the final [`StreamEvent::Done`] has been queued.
    fn event(&mut self, event: SseEvent, out: &mut VecDeque<StreamEvent>) -> Result<bool, ProviderError>;

    /// The body ended without the end marker: the completion, when what came is nonetheless a
    /// whole answer (some compatible servers skip the marker), or the error saying it broke off.
    fn ended_early(&mut self) -> Result<Completion, ProviderError>;
}

struct State<D> {
    provider: String,
    config: ProviderConfig,
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: SseParser,
    decoder: D,
    ready: VecDeque<StreamEvent>,
    failure: Option<ProviderError>,
    finished: bool,
    drained: bool,
}

/// The events of one streamed response, ending with `Done` or an error.
pub(crate) fn event_stream<D: Decoder>(
    provider: &str,
    config: &ProviderConfig,
    response: reqwest::Response,
    decoder: D,
) -> EventStream {
    let state = State {
        provider: provider.to_owned(),
        config: config.clone(),
        body: response.bytes_stream().boxed(),
        parser: SseParser::default(),
        decoder,
        ready: VecDeque::new(),
        failure: None,
        finished: false,
        drained: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.ready.pop_front() {
                return Some((Ok(event), state));
            }
            if let Some(error) = state.failure.take() {
                return Some((Err(error), state));
            }
            if state.finished {
                if !state.drained {
                    state.drained = true;
                    drain(&mut state.body).await;
                }
                return None;
            }
            state.read_more().await;
        }
    })
    .boxed()
}

impl<D: Decoder> State<D> {
    async fn read_more(&mut self) {
        let mut events = Vec::new();
        let mut body_ended = false;
        match tokio::time::timeout(self.config.idle_timeout, self.body.next()).await {
            Err(_) => {
                let message = format!("the stream went silent for {:?}", self.config.idle_timeout);
                return self.fail(ErrorKind::Timeout, message);
            }
            Ok(Some(Err(err))) => {
                let kind = if err.is_timeout() { ErrorKind::Timeout } else { ErrorKind::Connect };
                return self.fail(kind, format!("the stream broke off: {}", err.without_url()));
            }
            Ok(Some(Ok(chunk))) => {
                if let Err(err) = self.parser.push(&chunk, &mut events) {
                    return self.fail(ErrorKind::Protocol, err.to_string());
                }
            }
            Ok(None) => {
                if let Err(err) = self.parser.finish(&mut events) {
                    return self.fail(ErrorKind::Protocol, err.to_string());
                }
                body_ended = true;
            }
        }
        for event in events {
            match self.decoder.event(event, &mut self.ready) {
                Ok(false) => {}
                Ok(true) => {
                    self.finished = true;
                    return;
                }
                Err(error) => return self.failed(error),
            }
        }
        if body_ended {
            self.drained = true;
            self.end_without_marker();
        }
    }

    fn end_without_marker(&mut self) {
        match self.decoder.ended_early() {
            Ok(completion) => {
                self.ready.push_back(StreamEvent::Done(completion));
                self.finished = true;
            }
            Err(error) => self.failed(error),
        }
    }

    fn fail(&mut self, kind: ErrorKind, message: String) {
        self.failed(ProviderError::new(self.provider.clone(), kind, message));
    }

    fn failed(&mut self, mut error: ProviderError) {
        error.message = redact(&self.config, std::mem::take(&mut error.message));
        self.failure = Some(error);
        self.finished = true;
        self.drained = true; // A broken stream's connection is not reused.
    }
}

/// Reads what is left of the body, briefly, so the connection can be reused.
async fn drain(body: &mut BoxStream<'static, reqwest::Result<Bytes>>) {
    let _ = tokio::time::timeout(DRAIN_WAIT, async { while let Some(Ok(_)) = body.next().await {} }).await;
}
