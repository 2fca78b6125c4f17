"""``gnn-treelstm serve``: the page, the JSON API and its 400s over real HTTP (127.0.0.1)."""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gnn_treelstm.commands import serve as S
from gnn_treelstm.commands import train
from tests.commands.test_http import closed_within, exchange

SST5 = ["very negative", "negative", "neutral", "positive", "very positive"]
SENTENCE = "The film is a gorgeous , witty and moving story ."
TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "8", "--hidden", "6",
        "--threads", "1", "-q"]
# no proxy may see a request: every URL is http://127.0.0.1:PORT
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def require_spacy() -> None:
    from gnn_treelstm.datasets.dependency import load_pipeline

    try:
        load_pipeline(None)
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"no spaCy pipeline: {e}")


def tiny_sample_run(tmp_path_factory) -> Path:
    """A 1-epoch SST-5 Constituency Tree-LSTM (h 6) on the embedded sample's trees, trained
    once per test session (the browser test reuses it)."""
    from gnn_treelstm.datasets.build import build

    root = tmp_path_factory.getbasetemp() / "serve_tiny"
    run = root / "runs" / "sst"
    if (run / "best.pt").is_file():
        return run
    sample = Path(S.__file__).resolve().parents[1] / "sample_data"
    build("sst", sample, root / "data" / "sst", trees=["constituency"])
    assert train.main(["--task", "sst-5", "--data", str(root / "data" / "sst"),
                       "--runs-dir", str(root / "runs"), "--name", "sst", "--max-train", "64",
                       "--max-eval", "16", "--no-test", *TINY]) == 0
    return run


class Served:
    """A server on a free port of 127.0.0.1 in a thread; ``stop()`` shuts it down."""

    def __init__(self, explorer: S.Explorer, **limits):
        self.server = S.make_server(explorer, "127.0.0.1", 0, **limits)
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self.address = (host, port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def request(url: str, data: bytes | None = None, ctype: str = "application/json",
            method: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a request; HTTP errors are answers too."""
    assert url.startswith("http://127.0.0.1:")
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": ctype} if data is not None else {})
    try:
        with _OPENER.open(req, timeout=60) as r:
            return r.status, r.headers.get_content_type(), r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get_content_type(), e.read().decode("utf-8")


def post(url: str, obj) -> tuple[int, dict]:
    status, ctype, body = request(url + "/api/predict", json.dumps(obj).encode())
    assert ctype == "application/json"
    return status, json.loads(body)


@pytest.fixture(scope="module")
def sst_run(tmp_path_factory) -> Path:
    require_spacy()
    return tiny_sample_run(tmp_path_factory)


@pytest.fixture(scope="module")
def sst_explorer(sst_run) -> S.Explorer:
    return S.load_explorer(sst_run)


@pytest.fixture(scope="module")
def sst(sst_explorer):
    served = Served(sst_explorer)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def sick(tmp_path_factory):
    """A sentence-pair (SICK relatedness) dependency Child-Sum model on tiny random data."""
    require_spacy()
    from tests.tiny_data import build_tiny

    root = tmp_path_factory.mktemp("serve_sick")
    build_tiny(root / "data", "sick")
    assert train.main(["--task", "sick-r", "--model", "childsum", "--tree", "dependency",
                       "--data", str(root / "data"), "--runs-dir", str(root / "runs"),
                       "--name", "sickr", *TINY]) == 0
    served = Served(S.load_explorer(root / "runs" / "sickr"))
    yield served
    served.stop()


def test_page_has_the_form(sst):
    status, ctype, body = request(sst.url + "/")
    assert (status, ctype) == (200, "text/html")
    assert '<form id="form"' in body and 'id="sentence"' in body
    assert 'id="sentence_b"' not in body  # one-sentence model
    assert "sst-5" in body and "<svg" not in body


def test_api_draws_every_node_with_its_prediction(sst):
    status, res = post(sst.url, {"sentence": SENTENCE})
    assert status == 200
    assert res["label"] in SST5 and list(res["probabilities"]) == SST5
    (tree,) = res["trees"]
    tokens, nodes = tree["tokens"], tree["nodes"]
    assert tokens == SENTENCE.split()
    assert len(nodes) == 2 * len(tokens) - 1  # a binarized constituency tree
    assert len(tree["edges"]) == len(nodes) - 1
    roots = [n for n in nodes if n["parent"] is None]
    assert len(roots) == 1 and roots[0]["label"] == res["label"]
    assert all(n["label"] in SST5 and sum(n["probabilities"].values()) == pytest.approx(
        1, abs=1e-4) for n in nodes)
    assert [n["word"] for n in nodes[:len(tokens)]] == tokens
    # the drawing: one node element per tree node, carrying its label
    drawn = re.findall(r'<g class="node[^"]*" data-id="(\d+)"[^>]*data-label="([^"]*)"',
                       res["html"])
    assert sorted(int(i) for i, _ in drawn) == list(range(len(nodes)))
    assert {int(i): lab for i, lab in drawn} == {n["id"]: n["label"] for n in nodes}
    # GET with a query string answers the same
    q = urllib.parse.urlencode({"sentence": SENTENCE})
    status, _, body = request(f"{sst.url}/api/predict?{q}")
    assert status == 200 and json.loads(body) == res
    # a form-encoded POST too
    status, _, body = request(sst.url + "/api/predict", q.encode(),
                              "application/x-www-form-urlencoded")
    assert status == 200 and json.loads(body)["trees"] == res["trees"]


def test_served_trees_take_their_nodes_from_the_predictors_node_records(sst_explorer,
                                                                      monkeypatch):
    """One place builds a node's parent, span and words: serve's trees are those of
    ``predict --nodes`` (``models.predictor.node_records``), never a second computation."""
    from gnn_treelstm.models import predictor as P

    seen, real = [], P.node_records

    def spy(graph, tokens, labels):
        records = real(graph, tokens, labels)
        for r in records:  # marks that only a record built here can carry
            r["words"] = f"<{r['words']}>"
        seen.append(len(records))
        return records

    monkeypatch.setattr(P, "node_records", spy)
    res = sst_explorer.predict(SENTENCE)
    (tree,) = res["trees"]
    assert seen and seen[-1] == len(tree["nodes"])
    assert all(n["words"].startswith("<") and n["words"].endswith(">") for n in tree["nodes"])


def test_page_without_javascript_renders_the_tree(sst):
    q = urllib.parse.urlencode({"sentence": "a witty film"})
    status, ctype, body = request(f"{sst.url}/?{q}")
    assert (status, ctype) == (200, "text/html")
    assert body.count('<g class="node') == 5 and 'value="a witty film"' in body


@pytest.mark.parametrize("payload, message", [
    ({"sentence": ""}, "the sentence is empty"),
    ({"sentence": "   "}, "the sentence is empty"),
    ({}, "the sentence is empty"),
    ({"sentence": "word " * 300}, "the limit is 1000"),
    ({"sentence": "a film", "sentence_b": "another"}, "reads one sentence"),
    ({"sentence": "a film\nanother film"}, "line break"),
    ({"sentence": 3}, "sentence must be a string"),
    (["a film"], "send a JSON object"),
])
def test_bad_input_is_400_with_a_message(sst, payload, message):
    status, res = post(sst.url, payload)
    assert status == 400 and message in res["error"]
    assert "Traceback" not in res["error"]


def test_other_refusals(sst):
    status, ctype, body = request(sst.url + "/api/predict", b"{not json")
    assert status == 400 and "not valid JSON" in json.loads(body)["error"]
    status, ctype, body = request(sst.url + "/nope")
    assert status == 404 and ctype == "application/json"
    status, _, body = request(sst.url + "/", b"sentence=x", "application/x-www-form-urlencoded")
    assert status == 405 and "POST /api/predict" in json.loads(body)["error"]
    q = urllib.parse.urlencode({"sentence": "x" * 1001})
    status, ctype, body = request(f"{sst.url}/?{q}")
    assert (status, ctype) == (400, "text/html") and "the limit is 1000" in body
    big = json.dumps({"sentence": "x" * (S.MAX_BODY + 1)}).encode()
    status, _, body = request(sst.url + "/api/predict", big)
    assert status == 400 and "the limit is" in json.loads(body)["error"]


def test_parallel_requests_agree(sst):
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda s: post(sst.url, {"sentence": s}),
                                ["a good film", "a bad film"] * 3))
    assert all(status == 200 for status, _ in answers)
    assert answers[0] == answers[2] == answers[4] and answers[1] == answers[3]


def test_json_is_read_whatever_the_content_type(sst):
    body = json.dumps({"sentence": "a witty film"}).encode()
    status, _, want = request(sst.url + "/api/predict", body)
    assert status == 200
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "application/ld+json",
                  "text/plain; charset=utf-8"):
        status, got_type, got = request(sst.url + "/api/predict", body, ctype)
        assert (status, got_type) == (200, "application/json"), ctype
        assert json.loads(got) == json.loads(want), ctype
    # no Content-Type at all: JSON if it parses, else a form
    for data in (body, b"sentence=a+witty+film"):
        status, headers, got = exchange(sst.address, (
            f"POST /api/predict HTTP/1.0\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode() + data)
        assert status == 200 and json.loads(got)["trees"] == json.loads(want)["trees"]
    # a body that looks like JSON but is not: 400 whatever the type
    status, _, got = request(sst.url + "/api/predict", b'{"sentence": ', "text/plain")
    assert status == 400 and "not valid JSON" in json.loads(got)["error"]


@pytest.mark.parametrize("ctype", ["text/plain", "multipart/form-data; boundary=x",
                                   "application/xml"])
def test_other_bodies_are_415_naming_the_type(sst, ctype):
    status, got_type, body = request(sst.url + "/api/predict", b"a witty film", ctype)
    assert (status, got_type) == (415, "application/json")
    error = json.loads(body)["error"]
    assert ctype.split(";")[0] in error and "application/x-www-form-urlencoded" in error


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"])
def test_every_method_gets_a_json_answer(sst, method):
    status, ctype, body = request(sst.url + "/api/predict", b"{}", method=method)
    assert (status, ctype) == (405, "application/json")
    assert method in json.loads(body)["error"]
    status, headers, _ = exchange(sst.address, f"{method} / HTTP/1.0\r\n\r\n".encode())
    assert status == 405 and headers["allow"] == "GET"
    status, headers, _ = exchange(sst.address,
                                      f"{method} /api/predict HTTP/1.0\r\n\r\n".encode())
    assert status == 405 and headers["allow"] == "GET, POST"
    status, ctype, body = request(sst.url + "/nope", b"{}", method=method)
    assert (status, ctype) == (404, "application/json") and "/nope" in json.loads(body)["error"]


def test_head_and_malformed_requests_get_json_without_html(sst):
    status, headers, body = exchange(sst.address, b"HEAD / HTTP/1.0\r\n\r\n")
    assert status == 405 and headers["allow"] == "GET" and body == b""
    for data, code in ((b"GET / x HTTP/1.0\r\n\r\n", 400),
                       (b"GET /" + b"x" * 70000 + b" HTTP/1.0\r\n\r\n", 414),
                       (b"GET / HTTP/1.0\r\nX: " + b"x" * 70000 + b"\r\n\r\n", 431)):
        status, headers, body = exchange(sst.address, data)
        assert status == code, data[:20]
        assert headers["content-type"].startswith("application/json")
        assert json.loads(body)["error"] and b"<html" not in body.lower()


def _wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_clients_that_disconnect_are_one_debug_line(sst_explorer, caplog, capfd):
    served = Served(sst_explorer)
    caplog.set_level(logging.DEBUG, logger=S.log.name)
    try:
        # mid-body: 10 of 100 bytes, then the client closes
        with socket.create_connection(served.address) as sock:
            sock.sendall(b"POST /api/predict HTTP/1.0\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"sentence")
        # mid-answer: a request, then a reset before the answer is read
        for _ in range(5):
            sock = socket.create_connection(served.address)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00"
                            b"\x00\x00")
            q = urllib.parse.urlencode({"sentence": SENTENCE})
            sock.sendall(f"GET /?{q} HTTP/1.0\r\n\r\n".encode())
            sock.close()
        assert _wait_for(lambda: sum("client gone" in r.getMessage()
                                     for r in caplog.records) >= 2)
        # the server still answers
        assert post(served.url, {"sentence": "a witty film"})[0] == 200
    finally:
        served.stop()
    gone = [r for r in caplog.records if "client gone" in r.getMessage()]
    assert gone and all(r.levelno == logging.DEBUG and "\n" not in r.getMessage()
                        for r in gone)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not any(r.exc_info for r in caplog.records)
    assert "Traceback" not in capfd.readouterr().err


def test_stalled_clients_are_closed_after_the_timeout(sst_explorer):
    served = Served(sst_explorer, timeout=0.5)
    try:
        threads = threading.active_count()
        silent = socket.create_connection(served.address)
        half = socket.create_connection(served.address)
        half.sendall(b"POST /api/predict HTTP/1.0\r\nContent-Length: 50\r\n\r\n{\"sen")
        drip = socket.create_connection(served.address)
        t0 = time.monotonic()
        drip.sendall(b"GET / HTTP/1.0\r\n")
        # a byte every 0.1 s: each read is in time, the request as a whole is not
        for _ in range(40):
            try:
                drip.sendall(b"X")
            except OSError:
                break
            time.sleep(0.1)
        assert time.monotonic() - t0 < 3, "a dripping client held its connection"
        for sock in (silent, half, drip):
            assert closed_within(sock, 5) is not None
            sock.close()
        assert _wait_for(lambda: threading.active_count() <= threads)
        assert post(served.url, {"sentence": "a witty film"})[0] == 200
    finally:
        served.stop()


def test_connections_beyond_the_bound_get_a_quick_503(sst_explorer):
    served = Served(sst_explorer, timeout=1.5, max_connections=2)
    try:
        stalled = [socket.create_connection(served.address) for _ in range(2)]
        time.sleep(0.2)  # both accepted and holding their slots
        t0 = time.monotonic()
        status, ctype, body = request(served.url + "/api/predict",
                                      json.dumps({"sentence": "a witty film"}).encode())
        assert time.monotonic() - t0 < 1
        assert (status, ctype) == (503, "application/json")
        assert "--max-connections" in json.loads(body)["error"]
        status, headers, _ = exchange(served.address, b"GET / HTTP/1.0\r\n\r\n")
        assert status == 503 and headers["retry-after"] == "1"
        for sock in stalled:  # the stalled ones time out and free their slots
            assert closed_within(sock, 5) is not None
            sock.close()
        assert _wait_for(lambda: post(served.url, {"sentence": "a witty film"})[0] == 200)
    finally:
        served.stop()


def test_make_server_refuses_bad_limits(sst_explorer):
    with pytest.raises(ValueError, match="--timeout"):
        S.make_server(sst_explorer, "127.0.0.1", 0, timeout=0)
    with pytest.raises(ValueError, match="--max-connections"):
        S.make_server(sst_explorer, "127.0.0.1", 0, max_connections=0)


def test_pair_model_page_and_refusal(sick):
    status, _, body = request(sick.url + "/")
    assert status == 200 and 'id="sentence_b"' in body
    status, res = post(sick.url, {"sentence": "A man is playing a guitar ."})
    assert status == 400 and "reads sentence pairs" in res["error"]
    status, res = post(sick.url, {"sentence": "A man is playing a guitar .",
                                  "sentence_b": "Nobody plays ."})
    assert status == 200 and 1 <= res["score"] <= 5
    a, b = res["trees"]
    assert (a["side"], b["side"]) == ("a", "b") and len(b["nodes"]) == len(b["tokens"])
    # dependency trees: every node is a word and the edges carry relation names
    assert all(e["relation"] for e in a["edges"])
    assert res["html"].count('<g class="node') == len(a["nodes"]) + len(b["nodes"])
    assert res["html"].count('class="relation"') == len(a["edges"]) + len(b["edges"])


@pytest.mark.parametrize("pair", [False, True])
def test_a_request_parses_each_sentence_once(sst_explorer, sick, monkeypatch, pair):
    """The drawn trees are the ones predicted from: spaCy runs once per sentence."""
    import gnn_treelstm.datasets.dependency as dependency

    parsed: list[str] = []
    real = dependency.parse_texts

    def counting(nlp, texts):
        parsed.extend(texts)
        return real(nlp, texts)

    monkeypatch.setattr(dependency, "parse_texts", counting)
    if pair:
        sentences = ("A man is playing a guitar .", "Nobody plays .")
        res = sick.server.RequestHandlerClass.explorer.predict(*sentences)
    else:
        sentences = (SENTENCE,)
        res = sst_explorer.predict(SENTENCE)
    assert parsed == list(sentences)
    assert [t["tokens"] for t in res["trees"]] == [s.split() for s in sentences]


def test_cli_prints_the_real_port_and_exits_2_on_a_bad_checkpoint(sst_run, monkeypatch,
                                                                   capsys, tmp_path):
    assert S.main([str(tmp_path / "missing")]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert S.main([str(sst_run), "--checkpoint", str(tmp_path / "bad.pt")]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err

    servers = []
    real = S.make_server

    def keep(*args, **kwargs):
        servers.append(real(*args, **kwargs))
        return servers[-1]

    monkeypatch.setattr(S, "make_server", keep)
    codes = []
    thread = threading.Thread(target=lambda: codes.append(
        S.main([str(sst_run), "--port", "0", "--checkpoint", "best.pt"])), daemon=True)
    thread.start()
    try:
        for _ in range(600):  # the model and spaCy load first
            if servers or not thread.is_alive():
                break
            thread.join(timeout=0.1)
        assert servers, "serve did not start"
        port = servers[0].server_address[1]
        assert port != 0
        for _ in range(100):
            out = capsys.readouterr().out
            if out:
                break
            thread.join(timeout=0.1)
        assert out == f"serving {sst_run} on http://127.0.0.1:{port}\n"
        status, _, _ = request(f"http://127.0.0.1:{port}/")
        assert status == 200
    finally:
        if servers:
            servers[0].shutdown()
        thread.join(timeout=10)
    assert codes == [0]
