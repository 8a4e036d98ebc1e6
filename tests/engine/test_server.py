"""The official openai client works unchanged against `quire engine serve`'s app on a real socket."""

from __future__ import annotations

import base64
import io
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import uvicorn

from pipeline.engine.engine import Engine
from pipeline.engine.server import create_app
from tests.reference import random_image


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def client(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, max_num_seqs=8)
    port = _free_port()
    config = uvicorn.Config(create_app(engine, "tiny"), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
    server.should_exit = True
    thread.join(timeout=10)
    engine.close()


def _data_url(seed: int) -> str:
    buffer = io.BytesIO()
    random_image(90, 60, seed=seed).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_message(seed: int = 0) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _data_url(seed)}},
                                         {"type": "text", "text": "OCR:"}]}]


def test_chat_completion_with_an_image(client):
    reply = client.chat.completions.create(model="tiny", messages=_image_message(), max_tokens=8,
                                           extra_body={"ignore_eos": True})
    assert reply.choices[0].finish_reason == "length" and reply.choices[0].message.content
    assert reply.usage.completion_tokens == 8 and reply.usage.prompt_tokens > 8


def test_streaming_gives_the_same_text_as_non_streaming(client):
    whole = client.chat.completions.create(model="tiny", messages=_image_message(1), max_tokens=8,
                                           extra_body={"ignore_eos": True})
    chunks = list(client.chat.completions.create(model="tiny", messages=_image_message(1), max_tokens=8,
                                                 stream=True, extra_body={"ignore_eos": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_plain_string_text_only_message(client):
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}],
                                           max_tokens=4, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 4


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_a_bad_image_is_a_400_not_a_crash(client):
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                        {"type": "text", "text": "OCR:"}]}]
    with pytest.raises(openai.BadRequestError, match="undecodable"):
        client.chat.completions.create(model="tiny", messages=bad, max_tokens=4)
    remote = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]
    with pytest.raises(openai.BadRequestError, match="data URL"):
        client.chat.completions.create(model="tiny", messages=remote, max_tokens=4)


def test_concurrent_requests_all_complete(client):
    def ask(seed: int) -> int:
        reply = client.chat.completions.create(model="tiny", messages=_image_message(seed), max_tokens=6,
                                               extra_body={"ignore_eos": True})
        return reply.usage.completion_tokens

    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(ask, range(6))) == [6] * 6
