"""eager-serve honours every OpenAI and vLLM field it accepts, each checked against an independent
reference: logprobs against transformers' log-softmax of the same checkpoint (completions, chat,
and the prompt's with `echo`), penalties and `logit_bias` against the same rules applied to
transformers' logits step by step, `n` (one prefill, several choices), `min_tokens`,
`ignore_eos`, `stop_token_ids`, seeds, `generation_config.json`'s end tokens, the model named by
its path; and a field it cannot honour is a 400 naming it. Also the scheduling regressions a
static batcher would fail: a short request answered while a long one streams, a hang-up whose
only slot the next request needs."""

import concurrent.futures
import json
import re
import shutil

import httpx
import jsonschema
import pytest
import torch
import transformers

# The fixtures `server` (max-batch 4, chunks of 16) and `long_model` are test_serve's.
from test_serve import FIXTURE, LONG, NAME, PROMPTS, Served, long_model, server  # noqa: F401


@pytest.fixture(scope="module")
def hf():
    tok = transformers.AutoTokenizer.from_pretrained(FIXTURE)
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32).eval()
    return tok, model


def log_softmax(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)


def post(server, body, path="/v1/completions"):
    return httpx.post(server.url + path, json={"model": NAME, **body}, timeout=120)


def greedy_with(model, ids, n, adjust):
    """Greedy decoding of n tokens where adjust(logits, generated) changes each step's logits."""
    out = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids + out])).logits[0, -1].double()
        out.append(int(adjust(logits.clone(), out).argmax()))
    return out


def test_completion_logprobs_equal_transformers_log_softmax(server, hf):
    tok, model = hf
    r = post(server, {"prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0, "logprobs": 3}).json()
    lp = r["choices"][0]["logprobs"]
    ids = tok(PROMPTS[0]).input_ids
    new = greedy_with(model, ids, 8, lambda x, _: x)
    ref = log_softmax(model, ids + new)
    assert len(lp["token_logprobs"]) == r["usage"]["completion_tokens"] == len(new)
    for i, t in enumerate(new):
        want = ref[len(ids) - 1 + i]
        assert abs(lp["token_logprobs"][i] - float(want[t])) < 1e-4, i
        assert lp["tokens"][i] == tok.decode([t])
        top = torch.topk(want, 3)
        ref_top = [(tok.decode([k]), v) for v, k in zip(top.values.tolist(), top.indices.tolist())]
        # Keyed by text, as OpenAI's: tokens of the same text keep the most likely one's logprob.
        assert lp["top_logprobs"][i] == pytest.approx(
            {text: v for text, v in reversed(ref_top)} | {ref_top[0][0]: ref_top[0][1]}, abs=1e-4)
    # Offsets advance by each token's text.
    offs = lp["text_offset"]
    assert all(offs[i + 1] - offs[i] == len(lp["tokens"][i]) for i in range(len(offs) - 1))


def test_chat_logprobs_and_top_logprobs(server, hf):
    tok, model = hf
    messages = [{"role": "user", "content": "Hello world"}]
    r = server.client.chat.completions.create(model=NAME, messages=messages, max_tokens=5, temperature=0,
                                              logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    new = greedy_with(model, ids, 5, lambda x, _: x)
    ref = log_softmax(model, ids + new)
    assert len(content) == len(new)
    for i, (entry, t) in enumerate(zip(content, new)):
        assert abs(entry.logprob - float(ref[len(ids) - 1 + i][t])) < 1e-4
        assert entry.token == tok.decode([t]) and bytes(entry.bytes) == entry.token.encode()
        assert [e.token for e in entry.top_logprobs] == [tok.decode([k]) for k in torch.topk(ref[len(ids) - 1 + i], 2).indices]
    plain = server.client.chat.completions.create(model=NAME, messages=messages, max_tokens=5, temperature=0)
    assert plain.choices[0].logprobs is None


def test_echo_scores_the_prompt_as_an_eval_harness_asks(server, hf):
    """lm-eval's loglikelihood: echo, logprobs, max_tokens 0 — each prompt token's logprob given the
    ones before it, the first none; a 40-token prompt spans three prefill chunks of 16."""
    tok, model = hf
    ids = tok(" ".join(PROMPTS)).input_ids[:40]
    r = post(server, {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0}).json()
    lp = r["choices"][0]["logprobs"]
    ref = log_softmax(model, ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert len(lp["token_logprobs"]) == len(ids)
    for j in range(1, len(ids)):
        assert abs(lp["token_logprobs"][j] - float(ref[j - 1][ids[j]])) < 1e-4, j
    assert r["choices"][0]["text"] == tok.decode(ids, skip_special_tokens=True)
    assert r["usage"] == {"prompt_tokens": 40, "completion_tokens": 0, "total_tokens": 40,
                          "prompt_tokens_details": {"cached_tokens": 0}}
    # Every choice of a scoring request ends with its prompt; none decodes.
    two = post(server, {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1, "n": 2}).json()
    assert [c["logprobs"]["token_logprobs"] for c in two["choices"]] == [lp["token_logprobs"]] * 2
    # Echo with generation: the prompt's text then the completion's; streamed, the first chunk is the prompt.
    whole = post(server, {"prompt": PROMPTS[1], "max_tokens": 4, "echo": True, "temperature": 0}).json()
    alone = post(server, {"prompt": PROMPTS[1], "max_tokens": 4, "temperature": 0}).json()
    assert whole["choices"][0]["text"] == PROMPTS[1] + alone["choices"][0]["text"]
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
            "model": NAME, "prompt": PROMPTS[1], "max_tokens": 4, "echo": True, "temperature": 0, "stream": True}) as s:
        chunks = [json.loads(l[6:]) for l in s.iter_lines() if l.startswith("data: ") and l != "data: [DONE]"]
    assert chunks[0]["choices"][0]["text"] == PROMPTS[1]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]


def test_n_choices_share_one_prefill(server, hf):
    tok, _ = hf
    ids = tok(PROMPTS[2]).input_ids
    before = server.metric("eager_serve_prompt_tokens_total")
    r = post(server, {"prompt": PROMPTS[2], "max_tokens": 10, "temperature": 1.2, "n": 3, "seed": 5}).json()
    assert server.metric("eager_serve_prompt_tokens_total") - before == len(ids), "the prompt was prefilled once"
    texts = [c["text"] for c in r["choices"]]
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert len(set(texts)) == 3, texts
    assert 3 <= r["usage"]["completion_tokens"] <= 30 and r["usage"]["prompt_tokens"] == len(ids)
    # Choice 0 of a seeded request is that seed's single sample; greedy choices are all the greedy text.
    one = post(server, {"prompt": PROMPTS[2], "max_tokens": 10, "temperature": 1.2, "seed": 5}).json()
    assert one["choices"][0]["text"] == texts[0]
    greedy = post(server, {"prompt": PROMPTS[2], "max_tokens": 6, "temperature": 0}).json()["choices"][0]["text"]
    both = post(server, {"prompt": PROMPTS[2], "max_tokens": 6, "temperature": 0, "n": 2}).json()
    assert [c["text"] for c in both["choices"]] == [greedy, greedy]
    # Streamed: every choice's chunks carry its index and end with its own finish reason.
    stream = server.client.completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=6, temperature=0, n=2, stream=True)
    got = {0: "", 1: ""}
    finished = set()
    for c in stream:
        got[c.choices[0].index] += c.choices[0].text
        if c.choices[0].finish_reason:
            finished.add(c.choices[0].index)
    assert got == {0: greedy, 1: greedy} and finished == {0, 1}
    r = post(server, {"prompt": "x", "n": 5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


def test_a_cached_prefix_is_not_prefilled_again_and_the_text_is_unchanged(server, hf):
    """Slot-level prefix caching: a freed slot keeps its keys and values; a prompt that extends
    what it holds prefills only the rest (its last token always), and answers transformers' text."""
    tok, model = hf
    a = tok(" ".join(PROMPTS)).input_ids[:30]
    b = a + tok(PROMPTS[7]).input_ids[1:]
    first = post(server, {"prompt": a, "max_tokens": 4, "temperature": 0}).json()
    new_a = greedy_with(model, a, 4, lambda x, _: x)
    assert first["usage"]["prompt_tokens"] == 30
    held = a + new_a[:-1]  # the last token was chosen, never fed back
    shared = next((i for i, (x, y) in enumerate(zip(held, b)) if x != y), min(len(held), len(b)))
    hits, prefilled = server.metric("eager_serve_prefix_cache_hits_total"), server.metric("eager_serve_prompt_tokens_total")
    r = post(server, {"prompt": b, "max_tokens": 6, "temperature": 0}).json()
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == shared >= 30
    assert server.metric("eager_serve_prefix_cache_hits_total") - hits == shared
    assert server.metric("eager_serve_prompt_tokens_total") - prefilled == len(b) - shared
    assert r["choices"][0]["text"] == tok.decode(greedy_with(model, b, 6, lambda x, _: x), skip_special_tokens=True)
    # The same prompt again: all but its last token cached; streamed usage says so too.
    chunks = list(server.client.completions.create(model=NAME, prompt=b, max_tokens=6, temperature=0, stream=True,
                                                   stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == len(b) - 1
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r["choices"][0]["text"]


def test_different_seeds_give_different_samples(server):
    kw = dict(model=NAME, prompt=PROMPTS[3], max_tokens=16, temperature=1.0)
    a = {server.client.completions.create(**kw, seed=s).choices[0].text for s in (1, 2, 3)}
    assert len(a) == 3, a


# Each rule, and the rule a plausible slip would apply instead (the prompt's tokens counted where
# they must not be, or left out where they must be counted).
@pytest.mark.parametrize("body,rule,slip", [
    ({"repetition_penalty": 1.8},
     lambda ids: lambda x, out: _repetition(x, ids + out, 1.8),
     lambda ids: lambda x, out: _repetition(x, out, 1.8)),
    ({"frequency_penalty": 1.5, "presence_penalty": 0.5},
     lambda ids: lambda x, out: _counts(x, out, 1.5, 0.5),
     lambda ids: lambda x, out: _counts(x, ids + out, 1.5, 0.5)),
    ({"logit_bias": {"7": 3.0, "40": -100}},
     lambda ids: lambda x, out: _bias(x, {7: 3.0, 40: -100.0}),
     None),
], ids=["repetition", "frequency-presence", "logit-bias"])
def test_penalties_and_bias_follow_vllms_rules(server, hf, body, rule, slip):
    """Two prompts: one whose 24 greedy tokens repeat themselves from the 13th on (where output
    penalties bite), and the same followed by those first 12 tokens, so that greedy's next ones
    are already in the prompt (where counting the prompt or not decides)."""
    tok, model = hf
    start = tok(PROMPTS[4]).input_ids
    prompts = [start, start + greedy_with(model, start, 12, lambda x, _: x)]
    differs_from_plain = differs_from_slip = False
    for ids in prompts:
        r = post(server, {"prompt": ids, "max_tokens": 24, "temperature": 0, "ignore_eos": True, **body}).json()
        want = greedy_with(model, ids, 24, rule(ids))
        assert r["choices"][0]["text"] == tok.decode(want, skip_special_tokens=True)
        differs_from_plain |= want != greedy_with(model, ids, 24, lambda x, _: x)
        differs_from_slip |= slip is None or want != greedy_with(model, ids, 24, slip(ids))
    # Each check must mean something: the references differ from plain greedy and from the slip.
    assert differs_from_plain and differs_from_slip


def _repetition(x, seen, p):
    for t in set(seen):
        x[t] = x[t] / p if x[t] > 0 else x[t] * p
    return x


def _counts(x, out, freq, pres):
    for t in set(out):
        x[t] -= freq * out.count(t) + pres
    return x


def _bias(x, bias):
    for t, b in bias.items():
        x[t] += b
    return x


def test_min_tokens_ignore_eos_and_stop_token_ids(server, hf):
    tok, model = hf
    eos = tok.eos_token_id
    force_eos = {"logit_bias": {str(eos): 100}}
    r = post(server, {"prompt": PROMPTS[5], "max_tokens": 10, "temperature": 0, **force_eos}).json()
    assert (r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) == (1, "stop")
    r = post(server, {"prompt": PROMPTS[5], "max_tokens": 10, "temperature": 0, "min_tokens": 3, **force_eos}).json()
    assert (r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) == (4, "stop")
    r = post(server, {"prompt": PROMPTS[5], "max_tokens": 6, "temperature": 0, "ignore_eos": True, **force_eos}).json()
    assert (r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) == (6, "length")
    # A stop token: the text ends before it, and vLLM's stop_reason names it.
    ids = tok(PROMPTS[5]).input_ids
    new = greedy_with(model, ids, 8, lambda x, _: x)
    stop = new[3]
    cut = new.index(stop)
    r = post(server, {"prompt": PROMPTS[5], "max_tokens": 8, "temperature": 0, "stop_token_ids": [stop]}).json()
    assert r["choices"][0]["text"] == tok.decode(new[:cut], skip_special_tokens=True)
    assert (r["choices"][0]["finish_reason"], r["choices"][0]["stop_reason"]) == ("stop", stop)
    assert r["usage"]["completion_tokens"] == cut + 1


def test_generation_config_end_tokens_and_the_model_named_by_its_path(hf, tmp_path):
    tok, model = hf
    ids = tok(PROMPTS[6]).input_ids
    new = greedy_with(model, ids, 8, lambda x, _: x)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(FIXTURE, ckpt)
    cfg = json.loads((ckpt / "generation_config.json").read_text())
    cfg["eos_token_id"] = [tok.eos_token_id, new[2]]
    (ckpt / "generation_config.json").write_text(json.dumps(cfg))
    s = Served(model=ckpt)
    try:
        for name in (NAME, str(ckpt)):
            r = httpx.post(s.url + "/v1/completions", timeout=60,
                           json={"model": name, "prompt": PROMPTS[6], "max_tokens": 8, "temperature": 0}).json()
            assert r["choices"][0]["finish_reason"] == "stop", r
            assert r["usage"]["completion_tokens"] == new.index(new[2]) + 1
    finally:
        s.stop()


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "hi", "best_of": 2}, "best_of"),
    ("/v1/completions", {"prompt": "hi", "guided_json": {"type": "object"}}, "guided_json"),
    ("/v1/completions", {"prompt": "hi", "suffix": "end"}, "suffix"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 21}, "logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}, "response_format"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tool_choice"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "retrieval"}],
                              "tool_choice": "required"}, "tools[0]"),
    ("/v1/chat/completions", {"messages": [{"role": "tool", "content": "hi"}]}, "messages[0].tool_call_id"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"9999": 1}}, "logit_bias"),
])
def test_a_field_it_cannot_honour_is_a_400_naming_it(server, path, body, param):
    r = post(server, body, path)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_a_short_request_is_answered_while_a_long_one_streams(long_model):  # noqa: F811
    """Continuous batching: a static batcher would finish the long request (1000 tokens) before it
    answers the short one that arrived after it started."""
    s = Served("--max-batch", "2", "--prefill-chunk", "16", model=long_model)
    try:
        body = {**LONG, "max_tokens": 1000, "ignore_eos": True, "logprobs": 0, "stream": True}
        with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=120) as long:
            lines = long.iter_lines()
            first = next(lines)
            short = httpx.post(s.url + "/v1/completions", json={**LONG, "max_tokens": 3}, timeout=60).json()
            assert short["usage"]["completion_tokens"] == 3
            assert s.metric('eager_serve_requests_total{outcome="completed"}') == 1, "the long one still runs"
            data = [json.loads(l[6:]) for l in [first, *lines] if l.startswith("data: ") and l != "data: [DONE]"]
        tokens = sum(len(d["choices"][0]["logprobs"]["tokens"]) for d in data if d["choices"][0]["logprobs"])
        assert tokens == 1000 and data[-1]["choices"][0]["finish_reason"] == "length"
    finally:
        s.stop()


def test_a_hang_up_frees_the_only_slot_for_the_next_request(long_model):  # noqa: F811
    s = Served("--max-batch", "1", "--prefill-chunk", "16", model=long_model)
    try:
        with httpx.stream("POST", s.url + "/v1/completions", json={**LONG, "stream": True}, timeout=120) as r:
            lines = r.iter_lines()
            next(lines)
            assert s.metric("eager_serve_kv_blocks_in_use") == 1
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            nxt = pool.submit(lambda: httpx.post(s.url + "/v1/completions", json={**LONG, "max_tokens": 4}, timeout=60))
            assert nxt.result().json()["usage"]["completion_tokens"] == 4
        s.wait_metric('eager_serve_requests_total{outcome="cancelled"}', 1)
    finally:
        s.stop()


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags", "ok"],
          "properties": {"name": {"type": "string", "maxLength": 4},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
                         "ok": {"type": "boolean"}}}


def _fits(text, schema):
    """The text is compact JSON (no blank outside strings) that the schema validates."""
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False), text
    return value


def test_a_json_schema_reply_parses_and_fits_even_from_a_random_model(server):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    r = server.client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Who?"}],
                                              max_tokens=80, temperature=0, response_format=fmt)
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    _fits(r.choices[0].message.content, SCHEMA)
    # Sampled, several choices, streamed: each choice fits on its own.
    stream = server.client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Who?"}],
                                                   max_tokens=100, temperature=1.0, seed=3, n=2, stream=True,
                                                   response_format=fmt)
    texts, finish = {0: "", 1: ""}, {}
    for c in stream:
        texts[c.choices[0].index] += c.choices[0].delta.content or ""
        finish[c.choices[0].index] = c.choices[0].finish_reason
    assert finish == {0: "stop", 1: "stop"}, texts
    for t in texts.values():
        _fits(t, SCHEMA)
    # OpenAI's json_object, on completions too as vLLM takes it: any object, so a random model's free
    # keys may outrun the budget; what ends by itself parses, what does not says `length`.
    stopped = 0
    for prompt in PROMPTS[:4]:
        r = post(server, {"prompt": prompt, "max_tokens": 100, "temperature": 0,
                          "response_format": {"type": "json_object"}}).json()
        c = r["choices"][0]
        if c["finish_reason"] == "stop":
            assert isinstance(json.loads(c["text"]), dict), c
            stopped += 1
        else:
            assert (c["finish_reason"], r["usage"]["completion_tokens"]) == ("length", 100) and c["text"][0] == "{", c
    assert stopped >= 1


def test_vllms_structured_outputs_regex_choice_and_grammar(server):
    r = post(server, {"prompt": PROMPTS[1], "max_tokens": 20, "temperature": 1.0, "seed": 1,
                      "structured_outputs": {"regex": "[a-c]{3}-[0-9]{2}"}}).json()
    assert re.fullmatch("[a-c]{3}-[0-9]{2}", r["choices"][0]["text"]), r
    assert r["choices"][0]["finish_reason"] == "stop"
    for seed in (1, 2, 3):
        r = post(server, {"prompt": PROMPTS[1], "max_tokens": 20, "temperature": 1.0, "seed": seed,
                          "structured_outputs": {"choice": ["yes", "no", "maybe so"]}}).json()
        assert r["choices"][0]["text"] in ("yes", "no", "maybe so"), r
    r = post(server, {"prompt": PROMPTS[1], "max_tokens": 20, "temperature": 0,
                      "structured_outputs": {"grammar": 'start: "x=" NUM ";"\nNUM: /[0-9]{1,3}/'}}).json()
    assert re.fullmatch(r"x=[0-9]{1,3};", r["choices"][0]["text"]), r
    # What does not compile is a 400 naming the field it came from.
    bad = post(server, {"prompt": "x", "structured_outputs": {"regex": "(unclosed"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "structured_outputs", bad.text
    bad = post(server, {"prompt": "x", "response_format": {"type": "json_schema",
                                                           "json_schema": {"schema": {"type": "no-such-type"}}}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format", bad.text


WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
           "properties": {"city": {"enum": ["Oslo", "Paris"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The forecast", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {},
                                                                          "additionalProperties": False}}}]
# A template that renders tools, an assistant's calls and a tool's answer, as Qwen's and Llama 3's do.
TOOL_TEMPLATE = ("{%- if tools %}<|system|>Tools:{% for t in tools %} {{ t | tojson }}{% endfor %}</s>{% endif %}"
                 "{% for m in messages %}<|{{ m['role'] }}|>{% if m['content'] %}{{ m['content'] }}{% endif %}"
                 "{% for c in m['tool_calls'] or [] %}<call>{{ c['function'] | tojson }}</call>{% endfor %}"
                 "{% if m['tool_call_id'] %}[{{ m['tool_call_id'] }}]{% endif %}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory, long_model):  # noqa: F811
    """The 1024-position random Llama (tools' JSON makes long prompts) with TOOL_TEMPLATE."""
    ckpt = tmp_path_factory.mktemp("tools") / "ckpt"
    shutil.copytree(long_model, ckpt)
    (ckpt / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    s = Served("--max-batch", "4", model=ckpt)
    yield s, ckpt
    s.stop()


def test_the_template_receives_tools_calls_and_answers_as_transformers_renders_them(tool_server):
    s, ckpt = tool_server
    tok = transformers.AutoTokenizer.from_pretrained(ckpt)
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 2}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    r = s.client.chat.completions.create(model=NAME, messages=history, tools=TOOLS, tool_choice="none",
                                         max_tokens=6, temperature=0)
    # transformers gets the arguments as an object, as templates read them (and vLLM passes them).
    as_hf = [dict(m, tool_calls=[{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                                 for c in m["tool_calls"]]) if m.get("tool_calls") else m for m in history]
    text = tok.apply_chat_template(as_hf, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert '"description": "The forecast"' in text and '<call>{"name": "get_weather", "arguments": {"city": "Oslo"' in text
    ids = tok(text, add_special_tokens=False).input_ids
    assert r.usage.prompt_tokens == len(ids)
    assert r.choices[0].message.content == tok.decode(greedy_with(model, ids, 6, lambda x, _: x), skip_special_tokens=True)


def test_a_required_or_named_tool_call_fits_its_schema(tool_server):
    s, _ = tool_server
    msgs = [{"role": "user", "content": "Weather in Oslo?"}]
    for seed in (1, 2):
        r = s.client.chat.completions.create(model=NAME, messages=msgs, tools=TOOLS, tool_choice="required",
                                             max_tokens=80, temperature=1.0, seed=seed)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and c.message.content is None, c
        call = c.message.tool_calls[0]
        args = json.loads(call.function.arguments)
        assert call.function.name in ("get_weather", "now") and call.type == "function" and call.id
        jsonschema.validate(args, WEATHER if call.function.name == "get_weather" else TOOLS[1]["function"]["parameters"])
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = s.client.chat.completions.create(model=NAME, messages=msgs, tools=TOOLS, tool_choice=named, max_tokens=80,
                                         temperature=0)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    # Streamed: the call arrives whole in one delta, then the finish.
    chunks = list(s.client.chat.completions.create(model=NAME, messages=msgs, tools=TOOLS, tool_choice=named,
                                                   max_tokens=80, temperature=0, stream=True))
    calls = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.arguments for d in calls] == [call.function.arguments]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # "auto" (the default with tools) needs a parser of the model's own syntax: a 400, as vLLM without one.
    r = httpx.post(s.url + "/v1/chat/completions", json={"model": NAME, "messages": msgs, "tools": TOOLS}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text
