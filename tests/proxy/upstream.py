"""An honest upstream for the proxy's tests: chat completions, messages and Responses, streaming and not, billing
what it says.

It counts a prompt as the number of whitespace-separated words of every text
it was sent (never more than any tokenizer counts, nor than bytes), writes
`output` words or the request's cap, whichever is smaller, and reports exactly
that usage. `bill(prices)` says what it billed in all, so a test compares what
the proxy charged against what the provider would invoice.

The model name picks a behaviour: `...-overbill` reports twice the cap,
`...-drop` cuts a stream (or a reply) halfway, `...-busy` answers 429, `...-broken`
answers 500, `...-hang` never answers, `...-cachewrite` bills every UTF-8 byte of
the prompt's text as a token written to Anthropic's cache (the most any tokenizer
emits, at the cache-write rate), `...-legacy` reads only `max_tokens` (as older
OpenAI-compatible servers do), writing its own default without it, `...-nodelta`
streams Anthropic events whose message_delta carries no usage, `...-earlyusage` reports its usage
before its output and never again (OpenAI: the prompt and 0 completion tokens in the first chunk;
Anthropic: a message_delta of 1 output token before the first content block), `...-perbyte` bills a
prompt token per UTF-8 byte of its text (a model named like OpenAI's behind another server), a model whose
name holds `-quarter` bills a token per 4 UTF-8 bytes (rounded up) of every text it reads, tool specs and call
arguments too (about what a BPE tokenizer emits for English, so a byte bound is 4 times its bill), `...-lowball`
reports a tenth of the prompt it counts for a conversation's first call (no assistant message yet) and the
whole prompt after it (an upstream whose counts contradict each other), `...-toolcall`
answers a chat completion (not streamed) that offers function tools and holds no `tool` message yet with a
call of its first tool (arguments `{}`), billed as any reply of its cap is.

On the Responses API, a request with function tools whose input holds no function call's output yet is
answered with a call of its first tool (arguments `{}`), as a model that needs a tool's result does.

Like Anthropic, it bills a request with tools ANTHROPIC_TOOL_PROMPT tokens of
the tool-use system prompt it adds (the count Anthropic documents for its
current models).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

ANTHROPIC_TOOL_PROMPT = 346
# A server's own output cap when a request names none it reads.
DEFAULT_CAP = 4096


class Upstream:
    def __init__(self, output: int = 2000, compress: bool = False):
        self.output = output  # words a reply writes when its cap allows
        self.compress = compress  # gzip replies for clients that accept it (as CDN-fronted APIs do)
        self.calls: list[dict] = []  # per call: protocol, model, prompt, completion, cap, stream
        self.lock = threading.Lock()
        self.server: uvicorn.Server | None = None
        self.port = 0

    # ------------------------------------------------------------ accounting

    def billed(self, prices: dict[str, tuple[float, float]]) -> float:
        """µ$ of every call it billed, at `prices` (model -> input, output µ$ per token)."""
        with self.lock:
            return sum(call["prompt"] * prices[call["model"]][0] + call["completion"] * prices[call["model"]][1]
                       for call in self.calls if call["billed"])

    def _record(self, **call) -> None:
        with self.lock:
            self.calls.append(call)

    # ------------------------------------------------------------ the app

    @staticmethod
    def _bytes(value) -> int:
        if isinstance(value, str):
            return len(value.encode("utf-8", "surrogatepass"))
        if isinstance(value, list):
            return sum(Upstream._bytes(item) for item in value)
        if isinstance(value, dict):
            return sum(Upstream._bytes(item) for key, item in value.items() if key not in ("role", "type"))
        return 0

    @staticmethod
    def _words(value) -> int:
        if isinstance(value, str):
            return len(value.split())
        if isinstance(value, list):
            return sum(Upstream._words(item) for item in value)
        if isinstance(value, dict):
            return sum(Upstream._words(item) for key, item in value.items() if key != "role")
        return 0

    def app(self) -> Starlette:
        async def openai(request: Request) -> Response:
            return await self._answer(request, "openai")

        async def anthropic(request: Request) -> Response:
            return await self._answer(request, "anthropic")

        async def responses(request: Request) -> Response:
            return await self._answer(request, "responses")

        async def bill(request: Request) -> Response:
            with self.lock:
                tokens: dict[str, list[int]] = {}
                for call in self.calls:
                    if call["billed"]:
                        counts = tokens.setdefault(call["model"], [0, 0])
                        counts[0] += call["prompt"]
                        counts[1] += call["completion"]
            return JSONResponse(tokens)

        return Starlette(routes=[Route("/v1/chat/completions", openai, methods=["POST"]),
                                 Route("/v1/messages", anthropic, methods=["POST"]),
                                 Route("/v1/responses", responses, methods=["POST"]),
                                 Route("/bill", bill, methods=["GET"])])

    async def _answer(self, request: Request, protocol: str) -> Response:
        body = json.loads(await request.body())
        model = body["model"]
        prompt = self._words(body.get("messages")) + self._words(body.get("system")) + self._words(body.get("tools"))
        prompt += self._words(body.get("input")) + self._words(body.get("instructions"))
        if protocol == "anthropic" and body.get("tools"):
            prompt += ANTHROPIC_TOOL_PROMPT
        written = 0
        if model.endswith("-perbyte"):  # a server whose tokenizer emits a token per UTF-8 byte
            prompt = self._bytes(body.get("messages")) + self._bytes(body.get("system")) + self._bytes(body.get("input"))
        if "-quarter" in model:
            read = [body.get(name) for name in ("messages", "system", "tools", "input", "instructions")]
            prompt = -(-self._bytes(read) // 4)
        if model.endswith("-lowball") and not any(isinstance(message, dict) and message.get("role") == "assistant"
                                                  for message in body.get("messages") or ()):
            prompt //= 10
        if model.endswith("-cachewrite"):
            prompt = written = self._bytes(body.get("messages")) + self._bytes(body.get("system"))
        if model.endswith("-legacy"):
            cap = body.get("max_tokens") or DEFAULT_CAP
        else:
            cap = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens") or DEFAULT_CAP
        choices = body.get("n") or 1
        if model.endswith("-hang"):
            await asyncio.sleep(3600)
        if model.endswith("-busy"):
            self._record(protocol=protocol, model=model, prompt=0, completion=0, cap=cap, stream=False, billed=False)
            return JSONResponse({"error": {"message": "slow down", "type": "rate_limit"}}, 429,
                                headers={"retry-after": "1", "x-ratelimit-limit-requests": "3000",
                                         "x-ratelimit-remaining-requests": "0"})
        if model.endswith("-broken"):
            self._record(protocol=protocol, model=model, prompt=prompt, completion=0, cap=cap, stream=False, billed=True)
            return JSONResponse({"error": {"message": "oops", "type": "server"}}, 500)
        words = min(self.output, cap)
        reported = 2 * cap if model.endswith("-overbill") else words
        completion = reported * choices
        self._record(protocol=protocol, model=model, prompt=prompt, completion=completion, cap=cap,
                     stream=bool(body.get("stream")), billed=True)
        text = " ".join(["word"] * words)
        if protocol == "responses":
            return self._response(body, model, words, text, prompt, completion, cap)
        if protocol == "openai" and model.endswith("-toolcall") and not body.get("stream"):
            called = self._tool_call(body, model, choices, prompt, completion)
            if called is not None:
                return called
        if body.get("stream"):
            cut = model.endswith("-drop")
            maker = self._openai_events if protocol == "openai" else self._anthropic_events
            usage = body.get("stream_options", {}).get("include_usage") if protocol == "openai" else True
            events = maker(model, words, prompt, completion, usage, cut, written)
            return StreamingResponse(events, media_type="text/event-stream")
        if model.endswith("-drop"):
            return Response(b'{"id": "x", "choi', media_type="application/json")
        if protocol == "openai":
            return JSONResponse({
                "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "length"
                             if words == cap else "stop"} for i in range(choices)],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
            })
        return JSONResponse({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens" if words == cap else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": prompt - written, "cache_creation_input_tokens": written,
                                             "output_tokens": completion},
        })

    @staticmethod
    def _tool_call(body, model, choices, prompt, completion) -> Response | None:
        """A chat completion calling the first function tool, where tools are offered and none has answered yet."""
        tools = [tool for tool in body.get("tools") or () if tool.get("type") == "function"]
        if not tools or any(message.get("role") == "tool" for message in body.get("messages") or ()):
            return None
        called = {"id": "call_1", "type": "function",
                  "function": {"name": tools[0]["function"]["name"], "arguments": "{}"}}
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": None, "tool_calls": [called]},
                         "finish_reason": "tool_calls"} for i in range(choices)],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        })

    def _response(self, body, model, words, text, prompt, completion, cap) -> Response:
        """A Responses API answer: a function call of the first tool until the input holds a tool's output, else
        text; the usage in the response (on a stream, in `response.completed` only)."""
        tools = [tool for tool in body.get("tools") or () if tool.get("type") == "function"]
        given = body["input"] if isinstance(body["input"], list) else []
        if tools and not any(item.get("type") == "function_call_output" for item in given):
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": tools[0]["name"],
                    "arguments": "{}", "status": "completed"}
        else:
            item = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": completion,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + completion}
        done = {"id": "resp_1", "object": "response", "created_at": int(time.time()), "model": model,
                "status": "incomplete" if words == cap else "completed", "output": [item], "usage": usage,
                "incomplete_details": {"reason": "max_output_tokens"} if words == cap else None,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or [],
                "max_output_tokens": body.get("max_output_tokens")}
        if not body.get("stream"):
            if model.endswith("-drop"):
                return Response(b'{"id": "resp_1", "outp', media_type="application/json")
            return JSONResponse(done)
        early = None
        if model.endswith("-earlyusage"):  # the input's usage as the stream starts, and none at its end
            early, done["usage"] = {**usage, "output_tokens": 0, "total_tokens": prompt}, None
        return StreamingResponse(self._response_events(done, item, words, model.endswith("-drop"), early),
                                 media_type="text/event-stream")

    @staticmethod
    async def _response_events(done, item, words, cut, early):
        numbers = iter(range(1 << 20))

        def event(name, data) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, 'sequence_number': next(numbers), **data})}\n\n".encode()

        started = {**done, "status": "in_progress", "output": [], "usage": early, "incomplete_details": None}
        yield event("response.created", {"response": started})
        yield event("response.in_progress", {"response": started})
        opened = {**item, "status": "in_progress"}
        if item["type"] == "message":
            opened["content"] = []
        yield event("response.output_item.added", {"output_index": 0, "item": opened})
        if item["type"] == "message":
            yield event("response.content_part.added", {"item_id": item["id"], "output_index": 0, "content_index": 0,
                                                        "part": {"type": "output_text", "text": "", "annotations": []}})
            for index in range(0, words, 10):
                if cut and index >= words // 2:
                    raise ConnectionResetError("cut")
                piece = " ".join(["word"] * min(10, words - index)) + " "
                yield event("response.output_text.delta", {"item_id": item["id"], "output_index": 0,
                                                           "content_index": 0, "delta": piece, "logprobs": []})
            yield event("response.output_text.done", {"item_id": item["id"], "output_index": 0, "content_index": 0,
                                                      "text": item["content"][0]["text"], "logprobs": []})
            yield event("response.content_part.done", {"item_id": item["id"], "output_index": 0, "content_index": 0,
                                                       "part": item["content"][0]})
        else:
            yield event("response.function_call_arguments.delta", {"item_id": item["id"], "output_index": 0,
                                                                   "delta": item["arguments"]})
            yield event("response.function_call_arguments.done", {"item_id": item["id"], "output_index": 0,
                                                                  "arguments": item["arguments"], "name": item["name"]})
        yield event("response.output_item.done", {"output_index": 0, "item": item})
        yield event("response.incomplete" if done["status"] == "incomplete" else "response.completed",
                    {"response": done})

    @staticmethod
    async def _openai_events(model, words, prompt, completion, usage, cut, written):
        def event(data) -> bytes:
            return f"data: {json.dumps(data)}\n\n".encode()

        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model}
        early = model.endswith("-earlyusage")
        if early:
            usage = False
            yield event({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 0,
                                                          "total_tokens": prompt}})
        yield event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        for index in range(0, words, 10):
            if cut and index >= words // 2:
                raise ConnectionResetError("cut")
            piece = " ".join(["word"] * min(10, words - index)) + " "
            yield event({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        yield event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        if usage:
            yield event({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                          "total_tokens": prompt + completion}})
        yield b"data: [DONE]\n\n"

    @staticmethod
    async def _anthropic_events(model, words, prompt, completion, usage, cut, written):
        def event(name, data) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

        yield event("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                                                  "content": [], "stop_reason": None, "stop_sequence": None,
                                                  "usage": {"input_tokens": prompt - written,
                                                            "cache_creation_input_tokens": written,
                                                            "output_tokens": 1}}})
        early = model.endswith("-earlyusage")
        if early:
            yield event("message_delta", {"delta": {"stop_reason": None, "stop_sequence": None},
                                          "usage": {"output_tokens": 1}})
        yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        for index in range(0, words, 10):
            if cut and index >= words // 2:
                raise ConnectionResetError("cut")
            piece = " ".join(["word"] * min(10, words - index)) + " "
            yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
        yield event("content_block_stop", {"index": 0})
        # The cumulative usage; fields it does not repeat are null (the API's MessageDeltaUsage).
        delta = {"delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                 "usage": {"input_tokens": prompt - written, "cache_creation_input_tokens": None,
                           "cache_read_input_tokens": None, "output_tokens": completion}}
        if model.endswith("-nodelta") or early:
            del delta["usage"]
        yield event("message_delta", delta)
        yield event("message_stop", {})

    # ------------------------------------------------------------ running it

    def start(self) -> Upstream:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = self.app()
        if self.compress:
            from starlette.middleware.gzip import GZipMiddleware

            app = GZipMiddleware(app, minimum_size=16)
        config = uvicorn.Config(app, log_level="critical", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving, without waiting on a `-hang` request nobody will finish: no thread outlives its test."""
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join(5)
            self.server.force_exit = True  # uvicorn then cancels what is still in flight
            self.thread.join(60)
            assert not self.thread.is_alive(), "the upstream's server thread did not stop"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def main() -> None:
    """`python -m tests.proxy.upstream PORT OUTPUT`: serve until killed (benchmarks run it in its own process)."""
    import sys

    port, output = int(sys.argv[1]), int(sys.argv[2])
    upstream = Upstream(output=output)
    config = uvicorn.Config(upstream.app(), host="127.0.0.1", port=port, log_level="critical", access_log=False,
                            lifespan="off")
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
