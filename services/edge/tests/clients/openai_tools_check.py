"""The official OpenAI Python SDK's agent features against the edge's /v1/chat/completions.

Run on the pinned tools venv (scripts/install-tools.sh), with the edge's model answering as
services/edge/tests/clients.rs scripts it (a tool call while the request offers tools and does
not end in a tool result, then text; JSON when a response_format is asked for):

    .tools/venv/bin/python services/edge/tests/clients/openai_tools_check.py \
        --base-url http://127.0.0.1:8080/v1 --api-key KEY

Checks, each through the SDK exactly as an agent would call it:
  1. a function tool round trip, not streamed: the answer has finish_reason "tool_calls",
     content None and one call of get_weather with arguments {"city": "Paris"}; the SDK's own
     assistant message and a tool message go back and the final answer has the result's text;
  2. the same round trip streamed, the SDK's stream helper (chat.completions.stream) assembling
     the call from its argument pieces; the tool result then streams the final text;
  3. tool_choice forcing a function: the call names the forced function;
  4. a user message with an image part (a data: URL): an answer;
  5. response_format json_schema: the answer's content parses as JSON;
  6. bad input: tool_choice naming no tool of the request, the legacy `functions` and a tool
     message without tool_call_id each raise openai.BadRequestError (400) whose `param` names
     the field.

Prints one JSON summary line on stdout and exits 0; on any failure prints why on stderr and
exits 1. The SDK does not retry (max_retries=0), so a failure is the server's first answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import openai
from openai import OpenAI

SYSTEM = "You are a weather assistant. Use the tools."
QUESTION = "What is the weather in Paris?"
RESULT = "18C and sunny"
# A 1x1 PNG.
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


class CheckFailed(Exception):
    """A check that did not hold: the step it was in, and why."""


def check(condition: Any, why: str) -> None:
    if not condition:
        raise CheckFailed(why)


def opening() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def the_call(message: Any, what: str) -> Any:
    calls = message.tool_calls or []
    check(len(calls) == 1, f"{what}: expected one tool call, got {calls!r}")
    call = calls[0]
    check(call.type == "function", f"{what}: the call's type is {call.type!r}")
    check(call.id, f"{what}: the call has no id")
    check(call.function.name == "get_weather", f"{what}: the call names {call.function.name!r}")
    arguments = json.loads(call.function.arguments)
    check(arguments == {"city": "Paris"}, f"{what}: the call's arguments are {arguments!r}")
    return call


def continued(message: Any, call: Any) -> list[dict[str, Any]]:
    """The conversation with the model's tool call and the caller's result, as an agent sends it."""
    assistant = message.model_dump(exclude_none=True, exclude_unset=True)
    return opening() + [assistant, {"role": "tool", "tool_call_id": call.id, "content": RESULT}]


def round_trip(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    first = client.chat.completions.create(model=args.model, messages=opening(), tools=[WEATHER])
    choice = first.choices[0]
    check(choice.finish_reason == "tool_calls", f"finish_reason is {choice.finish_reason!r}")
    check(choice.message.content is None, f"content is {choice.message.content!r}, not None")
    call = the_call(choice.message, "first answer")
    second = client.chat.completions.create(
        model=args.model, messages=continued(choice.message, call), tools=[WEATHER]
    )
    answer = second.choices[0].message.content or ""
    check(second.choices[0].finish_reason == "stop", f"final finish_reason is {second.choices[0].finish_reason!r}")
    check(RESULT in answer, f"the final answer lacks the tool's result: {answer!r}")
    return {"call_id": call.id, "answer": answer}


def streamed_round_trip(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    with client.chat.completions.stream(model=args.model, messages=opening(), tools=[WEATHER]) as stream:
        pieces = sum(1 for event in stream if event.type == "tool_calls.function.arguments.delta")
        first = stream.get_final_completion()
    choice = first.choices[0]
    check(choice.finish_reason == "tool_calls", f"streamed finish_reason is {choice.finish_reason!r}")
    check(pieces >= 2, f"the arguments came in {pieces} piece(s); the vendor streams them in several")
    call = the_call(choice.message, "streamed answer")
    stream = client.chat.completions.create(
        model=args.model, messages=continued(choice.message, call), tools=[WEATHER], stream=True
    )
    chunks = list(stream)
    answer = "".join(c.delta.content or "" for chunk in chunks for c in chunk.choices)
    finish = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    check(finish == ["stop"], f"the final stream's finish reasons are {finish!r}")
    check(RESULT in answer, f"the streamed final answer lacks the tool's result: {answer!r}")
    return {"argument_pieces": pieces, "chunks": len(chunks), "answer": answer}


def forced_tool(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    completion = client.chat.completions.create(
        model=args.model,
        messages=opening(),
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
    )
    calls = completion.choices[0].message.tool_calls or []
    check([c.function.name for c in calls] == ["get_time"], f"the forced call is {calls!r}")
    return {"called": calls[0].function.name}


def image(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    completion = client.chat.completions.create(
        model=args.model,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": PIXEL, "detail": "low"}},
                ],
            }
        ],
    )
    answer = completion.choices[0].message.content or ""
    check(answer.strip(), "no answer to the image")
    return {"answer": answer}


def json_schema(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    completion = client.chat.completions.create(
        model=args.model,
        messages=opening(),
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "weather",
                "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "strict": True,
            },
        },
    )
    content = completion.choices[0].message.content or ""
    parsed = json.loads(content)
    check(isinstance(parsed, dict) and parsed.get("city") == "Paris", f"the JSON answer is {content!r}")
    return {"answer": parsed}


def bad_requests(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    cases = {
        "tool_choice.function.name": dict(
            messages=opening(), tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}
        ),
        "functions": dict(messages=opening(), functions=[WEATHER["function"]]),
        "messages[2].tool_call_id": dict(
            messages=opening() + [{"role": "tool", "content": RESULT}], tools=[WEATHER]
        ),
    }
    seen = {}
    for param, request in cases.items():
        try:
            client.chat.completions.create(model=args.model, **request)
        except openai.BadRequestError as error:
            check(error.status_code == 400, f"{param}: status {error.status_code}")
            check(error.type == "invalid_request_error", f"{param}: the error's type is {error.type!r}")
            check(error.param == param, f"{param}: the error's param is {error.param!r} ({error.message})")
            seen[param] = error.message
            continue
        raise CheckFailed(f"{param}: the request did not raise openai.BadRequestError")
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the edge's OpenAI API root, with /v1")
    parser.add_argument("--api-key", required=True, help="sent as Authorization: Bearer KEY")
    parser.add_argument("--model", default="switchyard", help="the model the chat calls name")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one request")
    parser.add_argument("--only", action="append", help="run only these steps (repeatable)")
    args = parser.parse_args()

    client = OpenAI(base_url=args.base_url, api_key=args.api_key, timeout=args.timeout, max_retries=0)
    summary: dict[str, Any] = {"ok": True, "openai": openai.__version__, "base_url": args.base_url}
    steps = [
        ("round_trip", round_trip),
        ("streamed_round_trip", streamed_round_trip),
        ("forced_tool", forced_tool),
        ("image", image),
        ("json_schema", json_schema),
        ("bad_requests", bad_requests),
    ]
    for name, step in steps:
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        try:
            result = step(client, args)
        except CheckFailed as error:
            print(f"openai_tools_check: {name}: {error}", file=sys.stderr)
            return 1
        except openai.APIStatusError as error:
            print(
                f"openai_tools_check: {name}: HTTP {error.status_code} {type(error).__name__}: {error.message}"
                f" (body: {error.body!r})",
                file=sys.stderr,
            )
            return 1
        except Exception as error:  # a crash in the SDK or in this script: still one clear line
            print(f"openai_tools_check: {name}: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        summary[name] = result
        summary.setdefault("seconds", {})[name] = round(time.monotonic() - started, 3)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
