"""eager-serve through real HTTP clients (OpenAI's Python client and httpx), against
transformers' own greedy generation on the same checkpoint (models/tests/fixtures/llama, a tiny
random Llama with a tokenizer and a chat template): completions and chat, streamed and not,
16 prompts at once, a long prompt prefilled in chunks, a client that hangs up mid-stream, a
full queue, the API key, OpenAI's 4xx errors, and SIGTERM draining the running requests.
Every server a test starts is ended by it (the fixtures kill and reap it)."""

import concurrent.futures
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time

import httpx
import openai
import pytest
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = ROOT / "target" / "release" / "eager-serve"
FIXTURE = ROOT / "models" / "tests" / "fixtures" / "llama"
NAME = "tiny-llama"
PROMPTS = [
    "Hello world, this is eager",
    "The quick brown fox",
    "Tokens stream to a callback",
    "eager runs tensor ops",
    "a REPL, a Jupyter kernel",
    "The lazy dog",
    "Every op finds a compiled executable",
    "models from Hugging Face",
]


class Served:
    """One eager-serve process on a free port; `url` once it answers."""

    def __init__(self, *args, model=FIXTURE, env=None):
        self.proc = subprocess.Popen(
            [str(BINARY), "--model", str(model), "--port", "0", "--served-model-name", NAME, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        m = re.search(r"at (http://\S+)", line)
        if not m:
            self.stop()
            raise AssertionError(f"eager-serve did not start: {line!r} {self.proc.stderr.read()}")
        self.url = m.group(1)
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=120)

    def metric(self, name):
        text = httpx.get(self.url + "/metrics").text
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
        assert m, f"{name} missing from /metrics:\n{text}"
        return float(m.group(1))

    def wait_metric(self, name, value, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.metric(name) == value:
                return
            time.sleep(0.05)
        raise AssertionError(f"{name} stayed at {self.metric(name)}, expected {value}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server():
    s = Served("--max-batch", "4", "--prefill-chunk", "16")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """A random Llama of 1024 positions with the fixture's tokenizer: a request of 1000 tokens
    runs for seconds, long enough to hang up on it, queue behind it or stop the server under it."""
    out = tmp_path_factory.mktemp("long-llama")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                   bos_token_id=0, eos_token_id=1, pad_token_id=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(FIXTURE).save_pretrained(out)
    return out


LONG = {"model": NAME, "prompt": "Hello", "max_tokens": 1000, "temperature": 0}


@pytest.fixture(scope="module")
def reference():
    tok = transformers.AutoTokenizer.from_pretrained(FIXTURE)
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32).eval()

    def greedy(ids, n):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        new = out[0, len(ids):].tolist()
        return new, tok.decode(new, skip_special_tokens=True)

    return tok, greedy


def test_health_and_models(server):
    assert httpx.get(server.url + "/health").text == "ok"
    models = server.client.models.list()
    assert [m.id for m in models.data] == [NAME]
    assert models.data[0].model_dump()["max_model_len"] == 128


def test_greedy_completions_equal_transformers(server, reference):
    tok, greedy = reference
    for prompt in PROMPTS[:3]:
        r = server.client.completions.create(model=NAME, prompt=prompt, max_tokens=12, temperature=0)
        ids = tok(prompt).input_ids
        new, text = greedy(ids, 12)
        assert r.choices[0].text == text, prompt
        assert r.usage.prompt_tokens == len(ids)
        assert r.usage.completion_tokens == len(new)
        assert r.choices[0].finish_reason == ("stop" if new[-1] == tok.eos_token_id else "length")
        assert r.object == "text_completion" and r.model == NAME


def test_sixteen_prompts_at_once_each_equal_their_single_result(server, reference):
    tok, greedy = reference
    prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(16)]
    lengths = [4 + (i * 5) % 17 for i in range(16)]

    def one(i):
        r = server.client.completions.create(model=NAME, prompt=prompts[i], max_tokens=lengths[i], temperature=0)
        return r.choices[0].text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, range(16)))
    for i in range(16):
        assert got[i] == greedy(tok(prompts[i]).input_ids, lengths[i])[1], i
    # Nothing holds a block once every request is answered.
    server.wait_metric("eager_serve_kv_blocks_in_use", 0)
    assert server.metric("eager_serve_running_batch") <= 4


def test_three_requests_decode_in_a_padded_batch_of_four_and_each_matches(server, reference):
    """Three rows run in the batch of 4 with one padding row on the scratch slot, step after step
    (a scratch slot passed once is donated to the step and must take the step's new cache)."""
    tok, greedy = reference
    prompts = PROMPTS[:3]

    def one(p):
        return server.client.completions.create(model=NAME, prompt=p, max_tokens=8, temperature=0).choices[0].text

    for _ in range(2):
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            got = list(pool.map(one, prompts))
        assert got == [greedy(tok(p).input_ids, 8)[1] for p in prompts]


def test_a_long_prompt_is_prefilled_in_chunks_and_still_matches(server, reference):
    tok, greedy = reference
    ids = tok(" ".join(PROMPTS)).input_ids[:70]
    r = server.client.completions.create(model=NAME, prompt=ids, max_tokens=10, temperature=0)
    assert r.choices[0].text == greedy(ids, 10)[1]
    assert r.usage.prompt_tokens == 70


def test_a_last_chunk_near_the_cache_end_is_prefilled_from_earlier_and_still_matches(reference):
    """The last chunk (1 token, padded to a bucket of 12) would run past a 40-position cache: it
    starts earlier, prefilling positions again, and the answer is still transformers'."""
    tok, greedy = reference
    s = Served("--max-model-len", "40", "--prefill-chunk", "12")
    try:
        ids = tok(" ".join(PROMPTS * 4)).input_ids[:37]
        assert len(ids) == 37
        r = s.client.completions.create(model=NAME, prompt=ids, max_tokens=3, temperature=0)
        assert r.choices[0].text == greedy(ids, 3)[1]
        assert r.usage.prompt_tokens == 37
    finally:
        s.stop()


def test_a_model_split_over_four_devices_serves_transformers_greedy_text(reference):
    """--tensor-parallel 4: the weights split over the CPU plugin's 4 devices as they are read
    (column- and row-parallel projections, the vocabulary split); eight prompts at once, each
    the text transformers generates."""
    tok, greedy = reference
    s = Served("--tensor-parallel", "4", "--max-batch", "4", env={"EAGER_CPU_DEVICES": "4"})
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: s.client.completions.create(
                model=NAME, prompt=p, max_tokens=8, temperature=0).choices[0].text, PROMPTS))
        assert answers == [greedy(tok(p).input_ids, 8)[1] for p in PROMPTS]
    finally:
        s.stop()


def test_chat_uses_the_checkpoints_template(server, reference):
    tok, greedy = reference
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello world"}]
    r = server.client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    new, text = greedy(list(ids), 8)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == text
    assert r.usage.prompt_tokens == len(ids)
    assert r.object == "chat.completion"


def test_streams_add_up_to_the_whole_answer_and_end_in_done(server):
    whole = server.client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=12, temperature=0)
    stream = server.client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=12, temperature=0,
                                              stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    chat = server.client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=6, temperature=0, stream=True)
    parts = list(chat)
    assert parts[0].choices[0].delta.role == "assistant"
    assert parts[-1].choices[0].finish_reason in ("stop", "length")
    # On the wire: server-sent events, the last one `data: [DONE]`.
    body = {"model": NAME, "prompt": "Hello", "max_tokens": 3, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert all(json.loads(e[6:])["object"] == "text_completion" for e in events[:-1])


def test_stop_strings_end_the_text_before_them(server):
    full = server.client.completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=16, temperature=0)
    text = full.choices[0].text
    assert len(text) > 4, text
    stop = text[2:4]
    r = server.client.completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=16, temperature=0, stop=[stop])
    assert r.choices[0].text == text[:text.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seeded_sampling_repeats_and_differs_from_greedy(server):
    kw = dict(model=NAME, prompt=PROMPTS[2], max_tokens=16, temperature=1.5, seed=7)
    a = server.client.completions.create(**kw).choices[0].text
    b = server.client.completions.create(**kw).choices[0].text
    greedy = server.client.completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=16, temperature=0)
    assert a == b
    assert a != greedy.choices[0].text


def test_bad_requests_get_openais_errors(server):
    def post(body, path="/v1/completions", raw=None):
        if raw is not None:
            return httpx.post(server.url + path, content=raw, headers={"content-type": "application/json"})
        return httpx.post(server.url + path, json=body)

    r = post({"model": "gpt-4", "prompt": "hi"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = post(None, raw=b"{not json")
    assert r.status_code == 400 and "not a valid request" in r.json()["error"]["message"]
    r = post({"model": NAME, "prompt": "hi", "max_tokens": 500})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 128 tokens" in r.json()["error"]["message"]
    r = post({"model": NAME, "prompt": "hi", "temperature": 7})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    r = post({"model": NAME, "prompt": [5, 100000]})
    assert r.status_code == 400 and "outside the vocabulary" in r.json()["error"]["message"]
    r = post({"model": NAME, "messages": []}, path="/v1/chat/completions")
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    with pytest.raises(openai.NotFoundError):
        server.client.completions.create(model="nope", prompt="hi")
    # The server is still up and right after all of that.
    assert server.client.completions.create(model=NAME, prompt="hi", max_tokens=2, temperature=0).choices


def test_a_client_that_hangs_up_frees_its_block(long_model):
    s = Served("--max-batch", "2", "--prefill-chunk", "16", model=long_model)
    try:
        with httpx.stream("POST", s.url + "/v1/completions", json={**LONG, "stream": True}, timeout=120) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(3)]
            assert any(g.startswith("data: ") for g in got)
            assert s.metric("eager_serve_kv_blocks_in_use") == 1
        s.wait_metric("eager_serve_kv_blocks_in_use", 0)
        s.wait_metric('eager_serve_requests_total{outcome="cancelled"}', 1)
        assert s.metric("eager_serve_generation_tokens_total") < 1000, "generation stopped with the client"
        assert s.metric('eager_serve_requests_total{outcome="completed"}') == 0
        # The freed block serves the next request.
        ok = httpx.post(s.url + "/v1/completions", json={**LONG, "max_tokens": 4}, timeout=60)
        assert ok.json()["usage"]["completion_tokens"] == 4
    finally:
        s.stop()


def test_a_full_queue_is_refused_with_503_and_retry_after(long_model):
    s = Served("--max-batch", "1", "--max-waiting", "1", model=long_model)
    try:
        with httpx.stream("POST", s.url + "/v1/completions", json={**LONG, "stream": True}, timeout=120) as a:
            a_lines = a.iter_lines()  # kept: a dropped line iterator closes the stream
            next(a_lines)  # A holds the one slot
            def queued():
                try:
                    httpx.post(s.url + "/v1/completions", json=LONG, timeout=120)
                except httpx.HTTPError:
                    pass  # the server is stopped under it at the end of the test

            waiting = threading.Thread(target=queued)
            waiting.start()
            s.wait_metric("eager_serve_queue_length", 1)  # B waits for the slot
            c = httpx.post(s.url + "/v1/completions", json=LONG, timeout=120)
            assert c.status_code == 503
            assert c.headers["retry-after"] == "1"
            assert c.json()["error"]["type"] == "server_error"
        s.stop()  # ends B too
        waiting.join()
    finally:
        s.stop()


def test_the_api_key_is_required_when_set():
    s = Served("--api-key", "sesame")
    try:
        r = httpx.post(s.url + "/v1/completions", json={"model": NAME, "prompt": "hi"})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        ok = openai.OpenAI(base_url=s.url + "/v1", api_key="sesame", max_retries=0)
        assert ok.completions.create(model=NAME, prompt="hi", max_tokens=2, temperature=0).choices
        assert httpx.get(s.url + "/health").status_code == 200, "health needs no key"
    finally:
        s.stop()


def refused_once_closed(url, deadline_s=30):
    """Polls until a new connection is refused (the listener closed); returns the seconds it took."""
    start = time.time()
    while time.time() - start < deadline_s:
        try:
            httpx.get(url + "/health", timeout=5)
        except httpx.ConnectError:
            return time.time() - start
        time.sleep(0.02)
    raise AssertionError("the server still accepted connections after SIGTERM")


def test_sigterm_drains_the_running_requests_then_exits(long_model):
    s = Served(model=long_model)
    try:
        body = {**LONG, "max_tokens": 300, "stream": True}
        with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()
            first = next(lines)
            s.proc.send_signal(signal.SIGTERM)
            # Closing: the listener goes, so a new request is refused while the running one finishes.
            refused_once_closed(s.url)
            with pytest.raises(httpx.ConnectError):
                httpx.post(s.url + "/v1/completions", json={**LONG, "max_tokens": 2}, timeout=60)
            rest = [line for line in [first, *lines] if line]
        data = [json.loads(line[6:]) for line in rest if line.startswith("data: ") and line != "data: [DONE]"]
        assert data[-1]["choices"][0]["finish_reason"] == "length", "the request ran to its end"
        assert "".join(d["choices"][0]["text"] for d in data)
        assert rest[-1] == "data: [DONE]"
        assert s.proc.wait(timeout=60) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(s.url + "/health")
    finally:
        s.stop()
