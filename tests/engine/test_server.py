"""The official openai client works unchanged against `quire engine serve`'s app on a real socket.

One uvicorn server on a free port in a background thread, over a real engine on the tiny checkpoint. The
tiny model's text is meaningless, so the tests compare the server with itself (streaming against not) and
with the engine's own counts, and use `ignore_eos` where a fixed length makes the assertion exact.
"""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import openai
import pytest
import uvicorn

from pipeline.engine.engine import Engine
from pipeline.engine.entrypoints.openai_server import openai_app
from tests.local_stack import free_port
from tests.reference import random_image

MODEL = "tiny"
FIXED = {"ignore_eos": True}  # extra_body: decode exactly max_tokens tokens


@dataclass
class Served:
    engine: Engine
    base_url: str
    client: openai.OpenAI


@pytest.fixture(scope="module")
def served(tiny_checkpoint) -> Iterator[Served]:
    engine = Engine.from_pretrained(tiny_checkpoint, max_num_seqs=8)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(openai_app(engine, MODEL), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    base_url = f"http://127.0.0.1:{port}"
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=60)
    yield Served(engine, base_url, client)
    client.close()
    server.should_exit = True
    thread.join(timeout=10)
    engine.close()


@pytest.fixture
def client(served: Served) -> openai.OpenAI:
    return served.client


def _data_url(seed: int) -> str:
    buffer = io.BytesIO()
    random_image(90, 60, seed=seed).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_message(seed: int = 0, url: str | None = None) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url or _data_url(seed)}},
                                         {"type": "text", "text": "OCR:"}]}]


def _wait_idle(engine: Engine, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats["running"] == 0 and stats["waiting"] == 0 and not engine.sequences:
            return True
        time.sleep(0.02)
    return False


def test_chat_completion_with_an_image(client):
    reply = client.chat.completions.create(model=MODEL, messages=_image_message(), max_tokens=8, extra_body=FIXED)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.model == MODEL and reply.id.startswith("chatcmpl-")
    assert choice.finish_reason == "length" and choice.message.role == "assistant" and choice.message.content
    assert reply.usage.completion_tokens == 8 and reply.usage.prompt_tokens > 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 8


def test_streaming_gives_the_same_text_and_usage_as_non_streaming(client):
    whole = client.chat.completions.create(model=MODEL, messages=_image_message(1), max_tokens=8, extra_body=FIXED)
    chunks = list(client.chat.completions.create(model=MODEL, messages=_image_message(1), max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}, extra_body=FIXED))
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == whole.choices[0].message.content
    assert with_choices[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == 8 and usage.total_tokens == whole.usage.total_tokens
    assert usage.prompt_tokens_details.cached_tokens > 0  # the same prompt again: a prefix-cache hit
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)


def test_plain_string_text_only_message(client):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}],
                                           max_completion_tokens=4, extra_body=FIXED)
    assert reply.usage.completion_tokens == 4 and reply.choices[0].finish_reason == "length"


def test_a_stop_string_ends_the_text_before_it(client):
    messages = [{"role": "system", "content": "Read it."}, *_image_message(2)]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, extra_body=FIXED)
    text = whole.choices[0].message.content
    stop = text[len(text) // 2:len(text) // 2 + 3]
    cut = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, stop=stop)
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].model_extra["quire_finish_reason"] == "stop"
    assert cut.choices[0].message.content == text[:text.index(stop)]


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list()] == [MODEL]


def test_health(served):
    assert httpx.get(f"{served.base_url}/health").json() == {"status": "ok"}


def test_a_bad_image_is_a_400_not_a_crash(client):
    bad = _image_message(url="data:image/png;base64,AAAA")
    with pytest.raises(openai.BadRequestError, match="undecodable") as raised:
        client.chat.completions.create(model=MODEL, messages=bad, max_tokens=4)
    assert raised.value.code == "undecodable"
    for url, match in [("http://example.com/a.png", "never fetches remote"), ("data:image/png;base64,@@", "base64")]:
        with pytest.raises(openai.BadRequestError, match=match):
            client.chat.completions.create(model=MODEL, messages=_image_message(url=url), max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="undecodable"):
        client.chat.completions.create(model=MODEL, messages=bad, max_tokens=4, stream=True)


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}], max_tokens=2)


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, None),
    ({"messages": [{"role": "user", "content": "<|IMAGE_PLACEHOLDER|>"}]}, "messages"),
    ({"messages": [{"role": "assistant", "content": _image_message()[0]["content"]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9}, None),
])
def test_bad_requests_are_openai_style_400s(served, body, param):
    reply = httpx.post(f"{served.base_url}/v1/chat/completions", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and error["code"]
    if param:
        assert error["param"] == param


def test_a_body_that_is_not_json_is_a_400(served):
    reply = httpx.post(f"{served.base_url}/v1/chat/completions", content=b"{not json",
                       headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


def test_concurrent_requests_all_complete(client):
    def ask(seed: int) -> int:
        reply = client.chat.completions.create(model=MODEL, messages=_image_message(seed), max_tokens=6,
                                               stream=seed % 2 == 1, extra_body=FIXED,
                                               **({"stream_options": {"include_usage": True}} if seed % 2 else {}))
        return reply.usage.completion_tokens if seed % 2 == 0 else list(reply)[-1].usage.completion_tokens

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ask, range(8))) == [6] * 8


def test_a_client_that_disconnects_mid_stream_cancels_its_request(served):
    endless = {"model": MODEL, "messages": _image_message(3), "max_tokens": 100_000, "ignore_eos": True,
               "stream": True}
    with httpx.stream("POST", f"{served.base_url}/v1/chat/completions", json=endless, timeout=30) as reply:
        lines = reply.iter_lines()  # held: a dropped line iterator closes the connection, which is a disconnect
        next(line for line in lines if '"content":"' in line and '"role"' not in line)
        assert served.engine.sequences, "the request should be decoding"
    assert _wait_idle(served.engine), "the engine kept decoding for a client that left"


def test_a_client_that_gives_up_on_a_completion_cancels_its_request(served):
    endless = {"model": MODEL, "messages": _image_message(4), "max_tokens": 100_000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.base_url}/v1/chat/completions", json=endless, timeout=httpx.Timeout(30, read=1.0))
    assert _wait_idle(served.engine), "the engine kept decoding for a client that left"
