"""The official OpenAI Python SDK against the edge's OpenAI-compatible API.

Run on the pinned tools venv (scripts/install-tools.sh):

    .tools/venv/bin/python services/edge/tests/clients/openai_check.py \
        --base-url http://127.0.0.1:8080/v1 --api-key KEY [--expect-content TEXT]

Checks, each through the SDK exactly as an application would call it:
  1. models.list() names switchyard, switchyard-direct, switchyard-mcp-agent and
     switchyard-multiagent;
  2. a non-streaming chat.completions.create(model="switchyard", messages=[system, user]):
     the assistant's answer is not empty, usage.total_tokens > 0, and the routing metadata the
     SDK keeps as an extra field (`_metadata`, in model_extra) has a route_type;
  3. the same call streamed with stream_options={"include_usage": True}: at least one content
     delta, a finish_reason on the last chunk that has choices, and a last chunk with no choices
     and the usage;
  4. a request whose last message is the assistant's: the SDK raises openai.BadRequestError
     with status 400;
  5. with_raw_response: the response's Content-Type is application/json and it parses to a
     ChatCompletion (the stream's is text/event-stream, checked in 3).
With --expect-content, both answers (2 and 3) must contain TEXT.

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

MODELS = ("switchyard", "switchyard-direct", "switchyard-mcp-agent", "switchyard-multiagent")
SYSTEM = "You are a helpful assistant. Answer in one short sentence."
QUESTION = "Say hello and tell me what you can help with."


class CheckFailed(Exception):
    """A check that did not hold: the step it was in, and why."""


def check(condition: Any, why: str) -> None:
    if not condition:
        raise CheckFailed(why)


def route_type(extra: dict[str, Any] | None, what: str) -> str:
    metadata = (extra or {}).get("_metadata")
    check(isinstance(metadata, dict), f"{what}: no `_metadata` object in the SDK's model_extra "
          f"(extra fields: {sorted((extra or {}).keys())})")
    route = metadata.get("route_type")
    check(isinstance(route, str) and route, f"{what}: `_metadata` has no route_type: {metadata}")
    return route


def expect(answer: str, expected: str | None, what: str) -> None:
    if expected is not None:
        check(expected in answer, f"{what}: the answer does not contain {expected!r}: {answer!r}")


def messages() -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def list_models(client: OpenAI) -> list[str]:
    ids = [model.id for model in client.models.list()]
    missing = [name for name in MODELS if name not in ids]
    check(not missing, f"models.list() lacks {missing}: it listed {ids}")
    return ids


def non_streaming(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    completion = client.chat.completions.create(
        model=args.model, messages=messages(), max_tokens=args.max_tokens
    )
    check(completion.object == "chat.completion", f"object is {completion.object!r}")
    check(completion.choices, "no choices")
    choice = completion.choices[0]
    content = choice.message.content
    check(isinstance(content, str) and content.strip(), f"choices[0].message.content is empty: {content!r}")
    check(choice.message.role == "assistant", f"choices[0].message.role is {choice.message.role!r}")
    check(choice.finish_reason, "choices[0].finish_reason is missing")
    check(completion.usage is not None, "no usage")
    check(completion.usage.total_tokens > 0, f"usage.total_tokens is {completion.usage.total_tokens}")
    route = route_type(completion.model_extra, "non-streaming")
    expect(content, args.expect_content, "non-streaming")
    return {
        "chars": len(content),
        "finish_reason": choice.finish_reason,
        "total_tokens": completion.usage.total_tokens,
        "route_type": route,
    }


def streaming(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    stream = client.chat.completions.create(
        model=args.model,
        messages=messages(),
        max_tokens=args.max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    content_type = stream.response.headers.get("content-type", "")
    check(content_type.startswith("text/event-stream"), f"the stream's Content-Type is {content_type!r}")
    chunks = list(stream)
    check(chunks, "the stream had no chunks")
    for chunk in chunks:
        check(chunk.object == "chat.completion.chunk", f"a chunk's object is {chunk.object!r}")
    deltas = [c.delta.content for chunk in chunks for c in chunk.choices if c.delta and c.delta.content]
    check(deltas, "no content delta in the stream")
    with_choices = [chunk for chunk in chunks if chunk.choices]
    finish = with_choices[-1].choices[0].finish_reason if with_choices else None
    check(finish, "the last chunk with choices has no finish_reason")
    last = chunks[-1]
    check(not last.choices, f"the last chunk has choices (include_usage asks for a usage chunk): {last}")
    check(last.usage is not None and last.usage.total_tokens > 0, f"the last chunk's usage is {last.usage}")
    early_usage = [chunk for chunk in chunks[:-1] if chunk.usage is not None]
    check(not early_usage, f"usage on a chunk before the last: {early_usage[0] if early_usage else None}")
    routes = [chunk.model_extra.get("_metadata") for chunk in chunks if (chunk.model_extra or {}).get("_metadata")]
    answer = "".join(deltas)
    expect(answer, args.expect_content, "streaming")
    return {
        "chunks": len(chunks),
        "content_deltas": len(deltas),
        "chars": len(answer),
        "finish_reason": finish,
        "total_tokens": last.usage.total_tokens,
        "route_type": (routes[-1] or {}).get("route_type") if routes else None,
    }


def bad_request(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    try:
        client.chat.completions.create(
            model=args.model,
            messages=[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}],
            max_tokens=args.max_tokens,
        )
    except openai.BadRequestError as error:
        check(error.status_code == 400, f"BadRequestError with status {error.status_code}")
        body = error.body if isinstance(error.body, dict) else {}
        check(body.get("message"), f"the error has no message: {error.body!r}")
        check(error.type == "invalid_request_error", f"the error's type is {error.type!r}")
        return {"status": error.status_code, "type": error.type, "code": error.code}
    raise CheckFailed("a request ending with an assistant message did not raise openai.BadRequestError")


def raw_response(client: OpenAI, args: argparse.Namespace) -> dict[str, Any]:
    raw = client.chat.completions.with_raw_response.create(
        model=args.model, messages=messages(), max_tokens=args.max_tokens
    )
    check(raw.status_code == 200, f"status {raw.status_code}")
    content_type = raw.headers.get("content-type", "")
    check(content_type.startswith("application/json"), f"Content-Type is {content_type!r}")
    completion = raw.parse()
    check(
        completion.choices and completion.choices[0].message.content,
        f"the raw response parsed to no answer: {completion}",
    )
    return {"status": raw.status_code, "content_type": content_type}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the edge's OpenAI API root, with /v1")
    parser.add_argument("--api-key", required=True, help="sent as Authorization: Bearer KEY")
    parser.add_argument("--expect-content", help="text both answers must contain")
    parser.add_argument("--model", default="switchyard", help="the model the chat calls name")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of each chat call")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one request")
    args = parser.parse_args()

    client = OpenAI(base_url=args.base_url, api_key=args.api_key, timeout=args.timeout, max_retries=0)
    summary: dict[str, Any] = {"ok": True, "openai": openai.__version__, "base_url": args.base_url}
    started = time.monotonic()
    steps = [
        ("models", lambda: list_models(client)),
        ("non_streaming", lambda: non_streaming(client, args)),
        ("streaming", lambda: streaming(client, args)),
        ("bad_request", lambda: bad_request(client, args)),
        ("raw_response", lambda: raw_response(client, args)),
    ]
    for name, step in steps:
        step_started = time.monotonic()
        try:
            result = step()
        except CheckFailed as error:
            print(f"openai_check: {name}: {error}", file=sys.stderr)
            return 1
        except openai.APIStatusError as error:
            print(
                f"openai_check: {name}: HTTP {error.status_code} {type(error).__name__}: {error.message}"
                f" (body: {error.body!r})",
                file=sys.stderr,
            )
            return 1
        except openai.APIError as error:
            print(f"openai_check: {name}: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        except Exception as error:  # a crash in the SDK or in this script: still one clear line
            print(f"openai_check: {name}: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        summary[name] = result
        summary.setdefault("seconds", {})[name] = round(time.monotonic() - step_started, 3)
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
