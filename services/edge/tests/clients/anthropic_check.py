"""The official Anthropic Python SDK against the edge's Messages API (/v1/messages).

Run on the pinned tools venv (scripts/install-tools.sh):

    .tools/venv/bin/python services/edge/tests/clients/anthropic_check.py \
        --base-url http://127.0.0.1:8080 --api-key KEY [--expect-content TEXT] [--steps a,b,...]

Steps, each through the SDK exactly as an application would call it (all by default):
  plain         messages.create(system=..., messages=[user]): a `message` with a text block, the
                stop_reason end_turn, usage.output_tokens > 0, and `_metadata` (an extra field)
                with a route_type;
  stream        messages.stream(...): the SDK's events arrive (message_start first, a text
                delta, message_stop last) and get_final_message() has the text;
  beta          beta.messages.create(betas=[...]): POST /v1/messages?beta=true with an
                anthropic-beta header, as Claude Code sends it;
  count_tokens  messages.count_tokens(...): input_tokens > 0, more with a tool than without;
  errors        an empty `messages` raises anthropic.BadRequestError (400,
                invalid_request_error); a body without max_tokens (sent with the SDK's low-level
                post, since create() will not send one) raises BadRequestError naming max_tokens;
                --bad-api-key's request raises anthropic.AuthenticationError (401);
  tools         a round trip with the get_weather tool: the answer is a tool_use block with
                input {"city": "Paris"} and stop_reason tool_use; the tool_result sent back
                gets a text answer (end_turn);
  tools_stream  the same round trip streamed: the SDK assembles the tool_use input from the
                input_json_delta events (it reports them as `input_json` events), then the
                continuation streams the text answer.
With --expect-content, the text answers of plain, stream and beta must contain TEXT; with
--expect-tool-answer, the answers after a tool result must contain that text.

Prints one JSON summary line on stdout and exits 0; on any failure prints why on stderr and
exits 1. The SDK does not retry (max_retries=0), so a failure is the server's first answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

import anthropic
from anthropic import Anthropic

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
QUESTION = "Say hello and tell me what you can help with."
TOOL_QUESTION = "What is the weather in Paris right now?"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city's name"}},
        "required": ["city"],
    },
}
WEATHER = "18 degrees and sunny"


class CheckFailed(Exception):
    """A check that did not hold: the step it was in, and why."""


def check(condition: Any, why: str) -> None:
    if not condition:
        raise CheckFailed(why)


def expect(answer: str, expected: str | None, what: str) -> None:
    if expected is not None:
        check(expected in answer, f"{what}: the answer does not contain {expected!r}: {answer!r}")


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def route_type(message: Any, what: str) -> str:
    metadata = (message.model_extra or {}).get("_metadata")
    check(isinstance(metadata, dict), f"{what}: no `_metadata` in the SDK's model_extra: {message.model_extra}")
    route = metadata.get("route_type")
    check(isinstance(route, str) and route, f"{what}: `_metadata` has no route_type: {metadata}")
    return route


def plain(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    message = client.messages.create(
        model=args.model,
        max_tokens=args.max_tokens,
        system=SYSTEM,
        messages=[{"role": "user", "content": QUESTION}],
        metadata={"user_id": "sdk-check"},
    )
    check(message.type == "message", f"type is {message.type!r}")
    check(message.role == "assistant", f"role is {message.role!r}")
    text = text_of(message)
    check(text.strip(), f"no text in the content: {message.content}")
    check(message.stop_reason == "end_turn", f"stop_reason is {message.stop_reason!r}")
    check(message.usage.output_tokens > 0, f"usage is {message.usage}")
    expect(text, args.expect_content, "plain")
    return {"chars": len(text), "stop_reason": message.stop_reason, "route_type": route_type(message, "plain")}


def stream(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    with client.messages.stream(
        model=args.model,
        max_tokens=args.max_tokens,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    ) as events:
        content_type = events.response.headers.get("content-type", "")
        check(content_type.startswith("text/event-stream"), f"the stream's Content-Type is {content_type!r}")
        kinds = [event.type for event in events]
        final = events.get_final_message()
    check(kinds and kinds[0] == "message_start", f"the first event is not message_start: {kinds[:3]}")
    check(kinds[-1] == "message_stop", f"the last event is not message_stop: {kinds[-3:]}")
    check("text" in kinds, f"no text delta among the events: {sorted(set(kinds))}")
    text = text_of(final)
    check(text.strip(), f"the final message has no text: {final.content}")
    check(final.stop_reason == "end_turn", f"stop_reason is {final.stop_reason!r}")
    check(final.usage.output_tokens > 0, f"the final usage is {final.usage}")
    expect(text, args.expect_content, "stream")
    return {"events": len(kinds), "kinds": sorted(set(kinds)), "chars": len(text)}


def beta(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    message = client.beta.messages.create(
        model=args.model,
        max_tokens=args.max_tokens,
        messages=[{"role": "user", "content": QUESTION}],
        betas=["token-efficient-tools-2025-02-19"],
    )
    text = "".join(block.text for block in message.content if block.type == "text")
    expect(text, args.expect_content, "beta")
    return {"chars": len(text), "stop_reason": message.stop_reason}


def count_tokens(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    messages = [{"role": "user", "content": QUESTION}]
    bare = client.messages.count_tokens(model=args.model, system=SYSTEM, messages=messages)
    check(bare.input_tokens > 0, f"input_tokens is {bare.input_tokens}")
    with_tool = client.messages.count_tokens(model=args.model, system=SYSTEM, messages=messages, tools=[WEATHER_TOOL])
    check(
        with_tool.input_tokens > bare.input_tokens,
        f"a tool adds no tokens: {with_tool.input_tokens} <= {bare.input_tokens}",
    )
    return {"input_tokens": bare.input_tokens, "with_tool": with_tool.input_tokens}


def errors(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        client.messages.create(model=args.model, max_tokens=args.max_tokens, messages=[])
        raise CheckFailed("empty messages did not raise anthropic.BadRequestError")
    except anthropic.BadRequestError as error:
        check(error.status_code == 400, f"BadRequestError with status {error.status_code}")
        body = error.body if isinstance(error.body, dict) else {}
        check(body.get("type") == "error", f"the body is not Anthropic's error shape: {error.body!r}")
        check(body.get("error", {}).get("type") == "invalid_request_error", f"error type: {error.body!r}")
        check("messages" in body.get("error", {}).get("message", ""), f"the field is not named: {error.body!r}")
        out["empty_messages"] = error.status_code
    try:
        client.post(
            "/v1/messages",
            body={"model": args.model, "messages": [{"role": "user", "content": QUESTION}]},
            cast_to=anthropic.types.Message,
        )
        raise CheckFailed("a body without max_tokens did not raise anthropic.BadRequestError")
    except anthropic.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        message = body.get("error", {}).get("message", "")
        check(message.startswith("max_tokens"), f"the error does not name max_tokens: {error.body!r}")
        out["missing_max_tokens"] = message
    if args.bad_api_key:
        bad = Anthropic(base_url=args.base_url, api_key=args.bad_api_key, max_retries=0, timeout=args.timeout)
        try:
            bad.messages.create(model=args.model, max_tokens=args.max_tokens, messages=[{"role": "user", "content": "x"}])
            raise CheckFailed("a bad API key did not raise anthropic.AuthenticationError")
        except anthropic.AuthenticationError as error:
            check(error.status_code == 401, f"AuthenticationError with status {error.status_code}")
            body = error.body if isinstance(error.body, dict) else {}
            check(body.get("error", {}).get("type") == "authentication_error", f"error type: {error.body!r}")
            out["bad_key"] = error.status_code
    return out


def tool_use_of(message: Any, what: str) -> Any:
    uses = [block for block in message.content if block.type == "tool_use"]
    check(len(uses) == 1, f"{what}: expected one tool_use block, got {message.content}")
    use = uses[0]
    check(use.name == "get_weather", f"{what}: the tool called is {use.name!r}")
    check(use.input == {"city": "Paris"}, f"{what}: the tool's input is {use.input!r}")
    check(use.id, f"{what}: the tool_use has no id")
    check(message.stop_reason == "tool_use", f"{what}: stop_reason is {message.stop_reason!r}")
    return use


def follow_up(first: Any, use: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": TOOL_QUESTION},
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": WEATHER}]},
    ]


def tools(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    first = client.messages.create(
        model=args.model,
        max_tokens=args.max_tokens,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": TOOL_QUESTION}],
    )
    use = tool_use_of(first, "tools")
    second = client.messages.create(
        model=args.model, max_tokens=args.max_tokens, tools=[WEATHER_TOOL], messages=follow_up(first, use)
    )
    text = text_of(second)
    check(text.strip(), f"no text after the tool result: {second.content}")
    check(second.stop_reason == "end_turn", f"stop_reason after the tool result is {second.stop_reason!r}")
    expect(text, args.expect_tool_answer, "tools")
    return {"tool_use_id": use.id, "answer": text, "metadata": (second.model_extra or {}).get("_metadata")}


def tools_stream(client: Anthropic, args: argparse.Namespace) -> dict[str, Any]:
    with client.messages.stream(
        model=args.model,
        max_tokens=args.max_tokens,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": TOOL_QUESTION}],
    ) as events:
        kinds = [event.type for event in events]
        first = events.get_final_message()
    pieces = kinds.count("input_json")
    check(pieces >= 1, f"no input_json event (input_json_delta) in the stream: {kinds}")
    use = tool_use_of(first, "tools_stream")
    with client.messages.stream(
        model=args.model, max_tokens=args.max_tokens, tools=[WEATHER_TOOL], messages=follow_up(first, use)
    ) as events:
        second = events.get_final_message()
    text = text_of(second)
    check(text.strip(), f"no text after the tool result: {second.content}")
    check(second.stop_reason == "end_turn", f"stop_reason after the tool result is {second.stop_reason!r}")
    expect(text, args.expect_tool_answer, "tools_stream")
    return {"input_json_events": pieces, "answer": text}


STEPS: dict[str, Callable[[Anthropic, argparse.Namespace], dict[str, Any]]] = {
    "plain": plain,
    "stream": stream,
    "beta": beta,
    "count_tokens": count_tokens,
    "errors": errors,
    "tools": tools,
    "tools_stream": tools_stream,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the edge's root URL (the SDK adds /v1/messages)")
    parser.add_argument("--api-key", required=True, help="sent as x-api-key")
    parser.add_argument("--bad-api-key", help="a key the edge refuses (the errors step expects a 401)")
    parser.add_argument("--expect-content", help="text the plain answers must contain")
    parser.add_argument("--expect-tool-answer", help="text the answers after a tool result must contain")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated steps to run")
    parser.add_argument("--model", default="claude-sonnet-4-5", help="the model the calls name")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of each call")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one request")
    args = parser.parse_args()

    client = Anthropic(base_url=args.base_url, api_key=args.api_key, timeout=args.timeout, max_retries=0)
    summary: dict[str, Any] = {"ok": True, "anthropic": anthropic.__version__, "base_url": args.base_url}
    started = time.monotonic()
    for name in args.steps.split(","):
        step = STEPS.get(name)
        if step is None:
            print(f"anthropic_check: unknown step {name!r} (steps: {', '.join(STEPS)})", file=sys.stderr)
            return 1
        step_started = time.monotonic()
        try:
            result = step(client, args)
        except CheckFailed as error:
            print(f"anthropic_check: {name}: {error}", file=sys.stderr)
            return 1
        except anthropic.APIStatusError as error:
            print(
                f"anthropic_check: {name}: HTTP {error.status_code} {type(error).__name__}: {error.message}"
                f" (body: {error.body!r})",
                file=sys.stderr,
            )
            return 1
        except Exception as error:  # a crash in the SDK or in this script: still one clear line
            print(f"anthropic_check: {name}: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        summary[name] = result
        summary.setdefault("seconds", {})[name] = round(time.monotonic() - step_started, 3)
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    print(json.dumps(summary, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
