//! [`LocalProvider`]: the model behind the [`Provider`] trait.
//!
//! Each request runs on a blocking thread of its own (`spawn_blocking`), after taking a
//! permit from a semaphore sized to the cores, so generations never run on the async
//! runtime's threads and never oversubscribe the CPU: a request beyond the limit waits for a
//! permit. Text is sent through a bounded channel as it is decoded; when the receiving
//! stream is dropped, the generation notices before its next token and stops.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use futures::StreamExt;
use switchyard_llm::{
    ChatRequest, Completion, ContentPart, ErrorKind, EventStream, FinishReason, Message, Provider, ProviderError,
    StreamEvent, ToolCall, ToolChoice, Usage,
};
use tokio::sync::{Semaphore, mpsc};

use crate::{
    LocalModel, MODEL_NAME, NO_TOOL_CALL_PREFIX, PROVIDER_NAME, chat, forward,
    generate::{self, Finish, Limits, Sampling},
    tools,
};

/// How the provider runs generations.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Generations running at once; more requests wait. Default: the number of cores.
    pub max_concurrent: usize,
    /// Threads each generation computes on. `None` (the default): all cores while a
    /// generation runs alone, one each while several run (see the crate docs for why).
    pub threads_per_generation: Option<usize>,
    /// Most tokens a conversation (prompt and answer) may hold. Default 2048 (the model was
    /// trained on 8192; attention cost and cache memory grow with it).
    pub max_context: usize,
    /// Answer tokens when the request gives no `max_tokens`. Default 512.
    pub default_max_tokens: u32,
    /// Seeds sampling (requests with a temperature) for reproducible output; `None` draws a
    /// seed per request.
    pub seed: Option<u64>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            max_concurrent: std::thread::available_parallelism().map_or(1, usize::from),
            threads_per_generation: None,
            max_context: 2048,
            default_max_tokens: 512,
            seed: None,
        }
    }
}

pub struct LocalProvider {
    model: Arc<LocalModel>,
    options: LocalOptions,
    permits: Arc<Semaphore>,
    /// The pool a lone generation computes on (adaptive threading), and how many run.
    shared: Option<(Arc<rayon::ThreadPool>, Arc<AtomicUsize>)>,
}

impl LocalProvider {
    pub fn new(model: Arc<LocalModel>) -> Self {
        Self::with_options(model, LocalOptions::default())
    }

    pub fn with_options(model: Arc<LocalModel>, options: LocalOptions) -> Self {
        let permits = Arc::new(Semaphore::new(options.max_concurrent.max(1)));
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let shared = match options.threads_per_generation {
            None if cores > 1 => forward::thread_pool(cores).map(|pool| (pool, Arc::new(AtomicUsize::new(0)))),
            _ => None,
        };
        Self { model, options, permits, shared }
    }

    pub fn model(&self) -> &Arc<LocalModel> {
        &self.model
    }

    pub fn options(&self) -> &LocalOptions {
        &self.options
    }
}

fn error(kind: ErrorKind, message: impl Into<String>) -> ProviderError {
    ProviderError::new(PROVIDER_NAME, kind, message)
}

#[async_trait::async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn complete(&self, request: ChatRequest) -> Result<Completion, ProviderError> {
        let mut stream = self.stream(request).await?;
        while let Some(event) = stream.next().await {
            if let StreamEvent::Done(completion) = event? {
                return Ok(completion);
            }
        }
        Err(error(ErrorKind::Protocol, "the local generation ended without a result"))
    }

    async fn stream(&self, request: ChatRequest) -> Result<EventStream, ProviderError> {
        if request.model != MODEL_NAME {
            return Err(error(
                ErrorKind::Rejected,
                format!("unknown model `{}`: the local provider serves only `{MODEL_NAME}`", request.model),
            ));
        }
        let request = servable(request)?;
        let (sender, receiver) = mpsc::channel(64);
        let (model, options, permits) = (self.model.clone(), self.options.clone(), self.permits.clone());
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // Wait for a free core, unless the caller gives up first.
            let permit = tokio::select! {
                permit = permits.acquire_owned() => permit,
                () = sender.closed() => return,
            };
            let Ok(permit) = permit else { return };
            let worker = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let _running = shared.as_ref().map(|(_, busy)| Running::start(busy));
                let result = run(&model, &options, shared.as_ref(), &request, &sender);
                if let Err(err) = result {
                    let _ = sender.blocking_send(Err(err));
                }
            });
            if let Err(err) = worker.await {
                tracing::error!(error = %err, "local generation panicked");
            }
        });
        Ok(tokio_stream_from(receiver))
    }
}

/// Refuses, naming the field, what the local model cannot serve rather than answer it
/// badly: images (it reads text only), a JSON response format (it cannot promise one), a tool
/// call it is required to make but cannot build. A named `tool_choice` narrows the tools to
/// that one.
fn servable(mut request: ChatRequest) -> Result<ChatRequest, ProviderError> {
    let unsupported = |field: String, message: String| ProviderError::unsupported(PROVIDER_NAME, field, message);
    for (position, message) in request.messages.iter().enumerate() {
        let (Message::User { parts, .. } | Message::Tool { parts, .. }) = message else { continue };
        if let Some(index) = parts.iter().position(|part| matches!(part, ContentPart::Image(_))) {
            let field = format!("messages[{position}].parts[{index}]");
            return Err(unsupported(field, "the local model reads text only, not images".to_owned()));
        }
    }
    if request.response_format.is_some() {
        let message = "the local model cannot promise an answer in JSON".to_owned();
        return Err(unsupported("response_format".to_owned(), message));
    }
    let must_call = !request.tools.is_empty() && !chat::has_tool_result_for_last_user(&request.messages);
    match request.tool_choice.clone() {
        ToolChoice::Function(name) => {
            let Some(position) = request.tools.iter().position(|tool| tool.name == name) else {
                return Err(unsupported("tool_choice".to_owned(), format!("`{name}` is not one of the tools")));
            };
            if must_call && let Err(reason) = tools::fillable(&request.tools[position]) {
                let field = format!("tools[{position}].parameters");
                return Err(unsupported(field, format!("the local model cannot call `{name}`: {reason}")));
            }
            request.tools.retain(|tool| tool.name == name);
            request.tool_choice = ToolChoice::Required;
        }
        ToolChoice::Required if must_call => {
            let reasons: Vec<String> = request
                .tools
                .iter()
                .filter_map(|tool| tools::fillable(tool).err().map(|reason| format!("`{}`: {reason}", tool.name)))
                .collect();
            if reasons.len() == request.tools.len() {
                let message =
                    format!("a tool call is required but the local model can call none: {}", reasons.join("; "));
                return Err(unsupported("tools".to_owned(), message));
            }
        }
        _ => {}
    }
    Ok(request)
}

fn tokio_stream_from(mut receiver: mpsc::Receiver<Result<StreamEvent, ProviderError>>) -> EventStream {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed()
}

/// One request, on a blocking thread. Events go to `sender`; returns early when it closes.
fn run(
    model: &LocalModel,
    options: &LocalOptions,
    shared: Option<&(Arc<rayon::ThreadPool>, Arc<AtomicUsize>)>,
    request: &ChatRequest,
    sender: &mpsc::Sender<Result<StreamEvent, ProviderError>>,
) -> Result<(), ProviderError> {
    let tokenizer = model.tokenizer();
    let context = options.max_context.min(model.config().context);
    let mut session = match shared {
        Some((pool, busy)) => model.adaptive_session(context, pool.clone(), busy.clone()),
        None => model.session(context, options.threads_per_generation.unwrap_or(1)),
    };
    let keep_going = || !sender.is_closed();
    let wants_tool = !request.tools.is_empty()
        && request.tool_choice != ToolChoice::None
        && !chat::has_tool_result_for_last_user(&request.messages);
    let invalid = |message: String| error(ErrorKind::Rejected, message);

    if wants_tool {
        let system = chat::tools_system(request.system.as_deref(), &request.tools);
        let prompt = chat::render(tokenizer, request, Some(&system)).map_err(invalid)?;
        check_fits(&prompt, context)?;
        let usage = |completion_tokens: usize| Usage {
            prompt_tokens: prompt.len() as u32,
            completion_tokens: completion_tokens as u32,
            cached_prompt_tokens: 0,
        };
        let completion = match tools::plan_call(&mut session, tokenizer, &prompt, &request.tools, &keep_going) {
            Ok(call) => {
                let id = call_id();
                let _ =
                    sender.blocking_send(Ok(StreamEvent::ToolCallStarted { id: id.clone(), name: call.name.clone() }));
                // The call is planned whole: its arguments come as one piece.
                let _ = sender.blocking_send(Ok(StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some(id.clone()),
                    name: Some(call.name.clone()),
                    arguments: call.arguments.clone(),
                }));
                let generated = session.len().saturating_sub(prompt.len());
                Completion {
                    content: String::new(),
                    tool_calls: vec![ToolCall { id, name: call.name, arguments: call.arguments }],
                    finish_reason: FinishReason::ToolCalls,
                    usage: usage(generated),
                    model: MODEL_NAME.to_owned(),
                    attempts: 1,
                }
            }
            Err(reason) => {
                if !keep_going() {
                    return Ok(());
                }
                let content = format!("{NO_TOOL_CALL_PREFIX}: {reason}.");
                let _ = sender.blocking_send(Ok(StreamEvent::Text(content.clone())));
                Completion {
                    content,
                    tool_calls: Vec::new(),
                    finish_reason: FinishReason::Other,
                    usage: usage(0),
                    model: MODEL_NAME.to_owned(),
                    attempts: 1,
                }
            }
        };
        let _ = sender.blocking_send(Ok(StreamEvent::Done(completion)));
        return Ok(());
    }

    let prompt = chat::render(tokenizer, request, None).map_err(invalid)?;
    check_fits(&prompt, context)?;
    let room = context - prompt.len();
    let max_tokens = request.max_tokens.unwrap_or(options.default_max_tokens) as usize;
    let limits = Limits {
        max_tokens: max_tokens.min(room),
        sampling: Sampling { temperature: request.temperature, seed: options.seed },
        stops: &request.stop,
    };
    let generated = generate::generate(
        &mut session,
        tokenizer,
        &prompt,
        &limits,
        |text| sender.blocking_send(Ok(StreamEvent::Text(text.to_owned()))).is_ok(),
        keep_going,
    )
    .map_err(|message| error(ErrorKind::Server, message))?;
    let finish_reason = match generated.finish {
        Finish::Cancelled => return Ok(()),
        Finish::Stop => FinishReason::Stop,
        Finish::Length => FinishReason::Length,
    };
    let completion = Completion {
        content: generated.text,
        tool_calls: Vec::new(),
        finish_reason,
        usage: Usage {
            prompt_tokens: prompt.len() as u32,
            completion_tokens: generated.tokens as u32,
            cached_prompt_tokens: 0,
        },
        model: MODEL_NAME.to_owned(),
        attempts: 1,
    };
    let _ = sender.blocking_send(Ok(StreamEvent::Done(completion)));
    Ok(())
}

/// Counts a running generation for as long as it lives.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(busy: &Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::Relaxed);
        Self(busy.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn check_fits(prompt: &[u32], context: usize) -> Result<(), ProviderError> {
    if prompt.len() >= context {
        return Err(error(
            ErrorKind::Rejected,
            format!("the prompt is {} tokens; the local model's context holds {context}", prompt.len()),
        ));
    }
    Ok(())
}

/// A call id unique within the process (`call_<time>_<counter>`).
fn call_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("call_{millis:x}_{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}
