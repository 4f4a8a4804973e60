"""The official OpenAI Python SDK's Responses API against the edge's /v1/responses.

Run on the pinned tools venv (scripts/install-tools.sh), with the edge's model answering as
services/edge/tests/responses.rs scripts it (a call of get_weather while the request offers it
and does not end in a tool result, then text with the result):

    .tools/venv/bin/python services/edge/tests/clients/openai_responses_check.py \
        --base-url http://127.0.0.1:8080/v1 --api-key KEY

Checks, each through the SDK as an agent would call it:
  1. not streamed: responses.create with a function tool answers one function_call output
     item (get_weather, arguments {"city": "Paris"}); a second turn by previous_response_id
     carrying only the function_call_output gets the final text (output_text has the result);
     responses.retrieve returns both answers as created;
  2. streamed: responses.create(stream=True) yields response.created first, the call's
     argument deltas joining to the arguments, response.completed last with the call; the
     second turn by previous_response_id streams output_text deltas joining to the answer;
  3. bad input: a built-in web_search tool, an unknown previous_response_id and a
     function_call_output answering no call each raise openai.BadRequestError (400) whose
     `param` names the field; retrieving an unknown id raises openai.NotFoundError.

Prints one JSON summary line on stdout and exits 0; on any failure prints why on stderr and
exits 1. The SDK does not retry (max_retries=0), so a failure is the server's first answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import openai
from openai import OpenAI

INSTRUCTIONS = "You are a weather assistant. Use the tools."
QUESTION = "What is the weather in Paris?"
RESULT = "18C and sunny"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def check(condition: bool, message: str) -> None:
    if not condition:
        fail(message)


def the_call(response: Any) -> Any:
    calls = [item for item in response.output if item.type == "function_call"]
    check(len(calls) == 1, f"one function_call item expected: {response.output}")
    call = calls[0]
    check(call.name == "get_weather", f"the call names get_weather: {call}")
    check(json.loads(call.arguments) == {"city": "Paris"}, f"the call's arguments: {call.arguments}")
    check(bool(call.call_id), f"the call has a call_id: {call}")
    return call


def plain(client: OpenAI, question: str) -> dict[str, Any]:
    first = client.responses.create(
        model="switchyard", instructions=INSTRUCTIONS, input=question, tools=[WEATHER]
    )
    check(first.object == "response" and first.status == "completed", f"a completed response: {first}")
    check(first.id.startswith("resp_"), f"a response id: {first.id}")
    call = the_call(first)
    second = client.responses.create(
        model="switchyard",
        instructions=INSTRUCTIONS,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": RESULT}],
        tools=[WEATHER],
    )
    check(RESULT in second.output_text, f"the final answer has the result: {second.output_text!r}")
    check(second.previous_response_id == first.id, f"previous_response_id echoed: {second}")
    check(second.usage is not None and second.usage.total_tokens > 0, f"usage: {second.usage}")
    again = client.responses.retrieve(first.id)
    check(again.id == first.id and the_call(again).call_id == call.call_id, f"retrieve: {again}")
    check(client.responses.retrieve(second.id).output_text == second.output_text, "retrieve the second")
    return {"first": first.id, "second": second.id, "answer": second.output_text,
            "session_id": getattr(second, "session_id", None)}


def streamed(client: OpenAI, question: str) -> dict[str, Any]:
    kinds: list[str] = []
    deltas: list[str] = []
    sequence: list[int] = []
    completed = None
    for event in client.responses.create(
        model="switchyard", instructions=INSTRUCTIONS, input=question, tools=[WEATHER], stream=True
    ):
        kinds.append(event.type)
        sequence.append(event.sequence_number)
        if event.type == "response.function_call_arguments.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    check(kinds[0] == "response.created", f"response.created first: {kinds}")
    check(kinds[-1] == "response.completed", f"response.completed last: {kinds}")
    check(sequence == list(range(len(sequence))), f"sequence numbers count up from 0: {sequence}")
    check(len(deltas) >= 2, f"the arguments stream in pieces: {deltas}")
    check(json.loads("".join(deltas)) == {"city": "Paris"}, f"the pieces join: {deltas}")
    check(completed is not None, "a completed response")
    call = the_call(completed)
    texts: list[str] = []
    final = None
    for event in client.responses.create(
        model="switchyard",
        previous_response_id=completed.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": RESULT}],
        tools=[WEATHER],
        stream=True,
    ):
        if event.type == "response.output_text.delta":
            texts.append(event.delta)
        if event.type == "response.completed":
            final = event.response
    check(final is not None, "the second turn completes")
    check(RESULT in "".join(texts), f"the streamed answer has the result: {texts}")
    check(final.output_text == "".join(texts), f"the deltas join to the answer: {final.output_text!r}")
    return {"events": len(kinds), "argument_pieces": len(deltas), "answer": final.output_text}


def bad_request(call: Any) -> str | None:
    try:
        call()
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        return body.get("param")
    fail("a BadRequestError was expected")
    return None


def errors(client: OpenAI) -> dict[str, Any]:
    web = bad_request(
        lambda: client.responses.create(model="switchyard", input="hi", tools=[{"type": "web_search"}])
    )
    check(web == "tools[0].type", f"web_search names tools[0].type: {web}")
    unknown = bad_request(
        lambda: client.responses.create(model="switchyard", input="hi", previous_response_id="resp_nothing")
    )
    check(unknown == "previous_response_id", f"an unknown previous response names it: {unknown}")
    orphan = bad_request(
        lambda: client.responses.create(
            model="switchyard",
            input=[
                {"role": "user", "content": QUESTION},
                {"type": "function_call_output", "call_id": "call_never_made", "output": RESULT},
            ],
            tools=[WEATHER],
        )
    )
    check(orphan == "input[1].call_id", f"a result of no call names its call_id: {orphan}")
    try:
        client.responses.retrieve("resp_nothing")
        fail("retrieving an unknown response should fail")
    except openai.NotFoundError:
        pass
    return {"web_search": web, "previous_response_id": unknown, "orphan": orphan}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=60)
    summary = {
        "plain": plain(client, QUESTION),
        "streamed": streamed(client, "And the weather in Paris, streamed?"),
        "errors": errors(client),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
