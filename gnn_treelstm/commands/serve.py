"""``gnn-treelstm serve``: a tree explorer page for a trained checkpoint.

    gnn-treelstm serve runs/NAME                 # http://127.0.0.1:8000
    gnn-treelstm serve runs/NAME --port 0        # any free port (the startup line names it)
    python -m gnn_treelstm serve runs/SICK --checkpoint last.pt

Like the live demo of the Sentiment Treebank (Socher et al. 2013): type a sentence (two for
the sentence-pair models), the server parses it with spaCy into the checkpoint's tree kind
and runs the model (both through :mod:`gnn_treelstm.models.predictor`), and the page shows the
tree as
SVG (:mod:`gnn_treelstm.trees.treesvg`): every node coloured by its predicted label (per-node
models, SST phrase level), its probabilities on hover.

Standard library only (the bounded server and JSON handler of
:mod:`gnn_treelstm.commands.http`); binds to 127.0.0.1 unless ``--host`` says otherwise.
Routes:

* ``GET /``: the page (a form; ``/?sentence=...`` renders a result without JavaScript).
* ``GET /api/predict?sentence=...[&sentence_b=...]`` or ``POST /api/predict`` (a JSON object
  or a form with the same fields): JSON ``{"text", "label", "probabilities" | "score",
  "unknown_words", "trees": [{"side", "tokens", "nodes", "edges"}], "html"}``; ``nodes`` are
  :mod:`gnn_treelstm.trees.treesvg` nodes, ``edges`` ``{"child", "parent", "relation"}``, ``html``
  the drawn result the page inserts.

A POST body that parses as JSON is read as JSON whatever its Content-Type; any other body
must be a form (``application/x-www-form-urlencoded``), else the answer is a 415 naming the
type. Bad input (an empty or too long sentence, a pair model given one sentence, a
one-sentence model given two, malformed JSON) is HTTP 400 with ``{"error": message}``; every
other refusal is JSON too: 404 for an unknown path, 405 with ``Allow`` for any other method
(``PUT``, ``DELETE``, ...), http.server's own 400/414/431. Anything else that fails is a 500
with a short message (the traceback goes to the log only). A checkpoint or spaCy pipeline
that cannot be loaded, or a model that cannot predict raw text, stops the command at startup
with exit status 2. The model runs on the level engine where its cell runs on it, else on
the checkpoint's, unless ``--engine`` names one
(:data:`gnn_treelstm.models.checkpoint.FASTEST`).

Bounds (:class:`ExplorerServer`): ``--max-connections`` (64) are served at once, one thread
each; a connection beyond that gets an immediate 503 and no thread. A client has
``--timeout`` seconds (30) to send its request and again to take the answer, so stalled
clients are closed and cannot hold threads. A client that disconnects mid-request or
mid-answer is one debug line in the log, never a traceback. Measured under load:
``docs/serve.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, parse_qs

from gnn_treelstm.argtypes import LOG_LEVELS, port, positive_float, positive_int
from gnn_treelstm.commands.cli import description, set_openmp_wait_policy
from gnn_treelstm.commands.http import (
    DEFAULT_TIMEOUT,
    MAX_BODY,
    MAX_CONNECTIONS,
    BadRequest,
    BoundedServer,
    JsonHandler,
    UnsupportedMediaType,
)
from gnn_treelstm.trees import treesvg

if TYPE_CHECKING:
    from gnn_treelstm.models.predictor import Predictor

__all__ = ["Explorer", "BadRequest", "ExplorerServer", "load_explorer", "make_server",
           "build_parser", "main", "MAX_CHARS", "MAX_BODY"]

log = logging.getLogger(__name__)

MAX_CHARS = 1000        # per sentence
_DEPENDENCY_TREES = ("dependency", "dependency-spacy")


class Explorer:
    """A loaded checkpoint and spaCy pipeline answering one request at a time (the model and
    the pipeline are shared by the server's threads, so predictions are serialized)."""

    def __init__(self, predictor: Predictor, *, name: str, max_chars: int = MAX_CHARS):
        if max_chars <= 0:
            raise ValueError(f"--max-chars must be positive, got {max_chars}")
        self.predictor, self.name, self.max_chars = predictor, name, max_chars
        ck = self.ck = predictor.checkpoint
        self.nlp = predictor.nlp
        task = ck.model.task
        self.pair = bool(task.pair)
        self.per_node = bool(getattr(task, "node_labels", False)) and not self.pair
        self.tree = predictor.tree
        self._lock = threading.Lock()

    def describe(self) -> str:
        rc = self.ck.run_config
        return (f"{self.ck.model.task.name} · {rc.get('model', '?')} · {self.tree} trees"
                + (" · per-node predictions" if self.per_node else ""))

    def check(self, a: str | None, b: str | None) -> tuple[str, str | None]:
        """The request's sentences, stripped, or :class:`BadRequest` saying what to fix."""
        a = (a or "").strip()
        b = (b or "").strip() or None
        if not a:
            raise BadRequest("the sentence is empty: type a sentence")
        for field, text in (("sentence", a), ("sentence_b", b)):
            if text is None:
                continue
            if len(text) > self.max_chars:
                raise BadRequest(f"{field} is {len(text)} characters long; the limit is "
                                 f"{self.max_chars} (serve --max-chars)")
            if "\n" in text or "\r" in text:
                raise BadRequest(f"{field} holds a line break; give one sentence per field")
        if self.pair and b is None:
            raise BadRequest(f"this model ({self.ck.model.task.name}) reads sentence pairs: "
                             "give the second sentence too (sentence_b)")
        if not self.pair and b is not None:
            raise BadRequest(f"this model ({self.ck.model.task.name}) reads one sentence; "
                             "leave sentence_b empty")
        return a, b

    def _tree(self, text: str, side: str, rec: dict, graph: Any) -> dict:
        """One side's tree: its structure from the graph the prediction was made from
        (:meth:`gnn_treelstm.models.predictor.Predictor.trees`), its nodes' parents, spans
        and words as ``predict --nodes`` records them
        (:func:`gnn_treelstm.models.predictor.node_records`), its tokens and per-node
        predictions from the record."""
        from gnn_treelstm.models.predictor import node_records

        tokens = rec["tokens_b"] if side == "b" else rec["tokens"]
        src = graph.edges()[0].tolist()
        rel_ids = graph.edata["rel"].tolist() if "rel" in graph.edata else [None] * len(src)
        names = self.ck.relations if self.tree in _DEPENDENCY_TREES else []
        relation = {s: names[r] if r is not None and 0 <= r < len(names) else None
                    for s, r in zip(src, rel_ids)}
        preds = {x["id"]: x for x in rec.get("nodes", [])}
        nodes = []
        for base in node_records(graph, tokens, [{}] * graph.num_nodes()):
            i = base["id"]
            own = i < len(tokens)
            node = {"id": i, "parent": base["parent"], "word": tokens[i] if own else None,
                    "token": i if own else None, "span": base["span"], "words": base["words"],
                    "relation": relation.get(i), "label": None, "probabilities": None}
            if i in preds:
                node.update(label=preds[i]["label"], probabilities=preds[i]["probabilities"])
            elif node["parent"] is None and not self.pair and "label" in rec:
                node.update(label=rec["label"], probabilities=rec["probabilities"])
            nodes.append(node)
        if preds and len(preds) != len(nodes):
            raise AssertionError("predict and the drawn tree disagree on the node count")
        edges = [{"child": n["id"], "parent": n["parent"], "relation": n["relation"]}
                 for n in nodes if n["parent"] is not None]
        return {"side": side, "text": text, "tokens": tokens, "nodes": nodes, "edges": edges}

    def predict(self, a: str | None, b: str | None = None) -> dict:
        """The JSON answer for one input (see the module docstring).

        Raises:
            BadRequest: the input is not acceptable (the message says why).
        """
        from gnn_treelstm.models.inputs import Input

        a, b = self.check(a, b)
        with self._lock:
            try:
                rec, graphs = self.predictor.trees(Input(1, a, b), nodes=self.per_node)
                trees = [self._tree(text, side, rec, graph)
                         for text, side, graph in zip((a, b), "ab", graphs)]
            except ValueError as exc:
                raise BadRequest(str(exc)) from exc
        out = {k: rec[k] for k in ("text", "text_b", "label", "score", "probabilities",
                                   "unknown_words") if k in rec}
        out["trees"] = trees
        out["html"] = self.render(out)
        return out

    def render(self, result: dict) -> str:
        """The drawn result: the prediction line and one SVG per tree."""
        probs = result.get("probabilities") or {}
        if "score" in result:
            head = f"relatedness score <b>{result['score']:.2f}</b> (1-5)"
        else:
            head = (f"prediction <b>{escape(result['label'])}</b> "
                    f"({probs.get(result['label'], 0):.3f})")
        dist = " · ".join(f"{escape(k)} {v:.3f}" for k, v in probs.items())
        parts = [f'<p class="prediction">{head}</p><p class="distribution">{dist}</p>']
        if result.get("unknown_words"):
            parts.append('<p class="unknown">words unknown to the model: '
                         f'{escape(" ".join(result["unknown_words"]))}</p>')
        for t in result["trees"]:
            caption = ("sentence B: " if t["side"] == "b" else
                       "sentence A: " if len(result["trees"]) > 1 else "") + t["text"]
            svg = treesvg.tree_svg(t["nodes"], label_names=self.ck.label_names,
                                   title=caption, legend=self.per_node or not self.pair)
            parts.append(f'<div class="tree-box" data-side="{t["side"]}">{svg}</div>')
        return "\n".join(parts)

    def page(self, a: str = "", b: str = "", result: str = "", error: str = "") -> str:
        """The explorer page, with a drawn result or an error message if given."""
        second = (f'<label>Sentence B <input id="sentence_b" name="sentence_b" size="70" '
                  f'maxlength="{self.max_chars}" value="{escape(b)}"></label><br>'
                  if self.pair else "")
        body = f"""<h1>Tree explorer</h1>
<p class="model">{escape(self.name)}: {escape(self.describe())}</p>
<form id="form" method="get" action="/">
<label>Sentence{" A" if self.pair else ""} <input id="sentence" name="sentence" size="70"
 maxlength="{self.max_chars}" value="{escape(a)}" autofocus></label><br>
{second}<button id="submit" type="submit">Parse and predict</button>
</form>
<p id="error" role="alert">{escape(error)}</p>
<div id="result">{result}</div>
<script>{_SCRIPT}</script>"""
        return treesvg.html_page(body, title=f"Tree explorer: {self.name}", style=_STYLE)


_STYLE = """
form input { font-size: 1.05em; margin: 0.2em 0; }
form button { font-size: 1em; margin-top: 0.4em; }
#error { color: #b00020; min-height: 1.2em; }
.model, .distribution, .unknown { color: #555; }
"""

# fetch the drawn result without reloading the page; the plain form GET still works without JS
_SCRIPT = """
document.getElementById('form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const body = {sentence: document.getElementById('sentence').value};
  const b = document.getElementById('sentence_b');
  if (b) body.sentence_b = b.value;
  const err = document.getElementById('error');
  const res = document.getElementById('result');
  err.textContent = '';
  try {
    const r = await fetch('/api/predict', {method: 'POST',
      headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
    const data = await r.json();
    if (!r.ok) { err.textContent = data.error; res.innerHTML = ''; return; }
    res.innerHTML = data.html;
  } catch (e) { err.textContent = 'request failed: ' + e; }
});
"""


def load_explorer(run: str | Path, *, checkpoint: str | None = None,
                  spacy_model: str | None = None, engine: str | None = None,
                  max_chars: int = MAX_CHARS) -> Explorer:
    """Load the checkpoint (``checkpoint``, a path or a file name inside ``run``; default
    ``run/best.pt``) and the spaCy pipeline, and predict one sentence to check they work.

    Raises:
        ValueError, FileNotFoundError: what cannot be loaded, or why the model cannot
            predict raw text.
    """
    from gnn_treelstm.models.checkpoint import checkpoint_path
    from gnn_treelstm.models.predictor import Predictor

    run = Path(run)
    path = checkpoint_path(run)
    if checkpoint is not None:
        inside = run / checkpoint if run.is_dir() else None
        path = inside if inside is not None and inside.is_file() else Path(checkpoint)
    predictor = Predictor.from_pretrained(path, engine=engine, spacy_model=spacy_model)
    explorer = Explorer(predictor, name=run.name or str(run), max_chars=max_chars)
    try:
        explorer.predict("This is a test.", "This is a test." if explorer.pair else None)
    except BadRequest as exc:
        raise ValueError(f"{path}: the model cannot label typed sentences: {exc}") from exc
    return explorer


#: the routes and the methods each answers (any other method: 405 with ``Allow``)
_ROUTES = {"/api/predict": ("GET", "POST"), "/": ("GET",), "/index.html": ("GET",)}


class _Handler(JsonHandler):
    """The explorer's routes: the page and the JSON API."""

    explorer: Explorer  # set on the subclass make_server builds
    routes = _ROUTES
    pages_hint = "/ or /api/predict"
    server_version = "gnn-treelstm-serve"

    def method_hint(self, path: str) -> str:
        return " (predictions are GET or POST /api/predict)" if path != "/api/predict" else ""

    def answer(self, url: SplitResult) -> None:
        ex = self.explorer
        f = self._fields(url)
        if url.path == "/api/predict":
            self.json(200, ex.predict(f.get("sentence"), f.get("sentence_b")))
            return
        a, b = f.get("sentence", ""), f.get("sentence_b", "")
        if not (a or b):
            self.send(200, ex.page(), "text/html")
            return
        try:
            html = ex.render(ex.predict(a, b))
        except BadRequest as exc:
            self.send(400, ex.page(a, b, error=str(exc)), "text/html")
            return
        self.send(200, ex.page(a, b, result=html), "text/html")

    def _fields(self, url: SplitResult) -> dict[str, str]:
        """The request's fields: the query string, or a POST body (JSON or a form).

        A body that parses as JSON is read as JSON whatever its Content-Type (``curl -d``
        sends ``application/x-www-form-urlencoded``, scripts often ``text/plain``); other
        bodies must be forms, or the answer is a 415 naming the type."""
        if self.command == "GET":
            self.request_read()
            return {k: v[-1] for k, v in parse_qs(url.query).items()}
        text = self.body()
        declared = self.headers.get("Content-Type")
        ctype = self.headers.get_content_type() if declared else None
        if (ctype == "application/json" or (ctype or "").endswith("+json")
                or text.lstrip()[:1] in ("{", "[")):
            return self._json_fields(text)
        if ctype not in (None, "application/x-www-form-urlencoded"):
            raise UnsupportedMediaType(
                f"Content-Type {ctype} is not read here: send a JSON object "
                '({"sentence": "...", "sentence_b": ...}) or a form '
                "(application/x-www-form-urlencoded)")
        return {k: v[-1] for k, v in parse_qs(text).items()}

    @staticmethod
    def _json_fields(text: str) -> dict[str, str]:
        try:
            obj = json.loads(text or "null")
        except (ValueError, RecursionError) as exc:  # a 5,001-digit number, deep nesting
            raise BadRequest(f"the request body is not valid JSON, or not JSON this server "
                             f"reads ({str(exc)[:200] or type(exc).__name__})") from None
        if not isinstance(obj, dict):
            raise BadRequest('send a JSON object: {"sentence": "...", "sentence_b": ...}')
        bad = [k for k in ("sentence", "sentence_b") if obj.get(k) is not None
               and not isinstance(obj[k], str)]
        if bad:
            raise BadRequest(f"{bad[0]} must be a string, got {type(obj[bad[0]]).__name__}")
        return {k: v for k, v in obj.items() if isinstance(v, str)}


class ExplorerServer(BoundedServer):
    """The explorer's :class:`~gnn_treelstm.commands.http.BoundedServer`: at most
    ``max_connections`` connections at once (more get a 503), ``timeout`` seconds for a
    request; it logs as this command."""

    log = log


def make_server(explorer: Explorer, host: str = "127.0.0.1", port: int = 8000, *,
                timeout: float = DEFAULT_TIMEOUT, max_connections: int = MAX_CONNECTIONS
                ) -> ExplorerServer:
    """A bound server (``port=0``: any free port, see ``server.server_address``); call
    ``serve_forever()``, and ``shutdown()`` + ``server_close()`` to stop it. ``timeout``:
    seconds a client has to send its request (and to take the answer);
    ``max_connections``: connections served at once (more get a 503)."""
    handler = type("ExplorerHandler", (_Handler,), {"explorer": explorer, "timeout": timeout})
    return ExplorerServer((host, port), handler, timeout=timeout,
                          max_connections=max_connections)


# ---------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    from gnn_treelstm.cells.registry import CELL_MODULE_HELP
    from gnn_treelstm.engine.propagator import ENGINES
    from gnn_treelstm.models.checkpoint import FASTEST, FASTEST_ENGINE

    ap = argparse.ArgumentParser(prog="gnn-treelstm serve",
                                 description=description(__doc__))
    ap.add_argument("run", help="run directory (its best.pt) or checkpoint file")
    ap.add_argument("--checkpoint", default=None, metavar="FILE",
                    help="checkpoint to serve: a file name inside RUN (e.g. last.pt) or a path")
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=port, default=8000, help="port (0: any free one)")
    ap.add_argument("--spacy-model", default=None,
                    help="spaCy pipeline (default: the first installed English one)")
    ap.add_argument("--engine", default=FASTEST, choices=ENGINES,
                    help=f"propagation engine (default: {FASTEST_ENGINE}, the fastest, where "
                    "the model's cell runs on it; both compute the same)")
    ap.add_argument("--max-chars", type=positive_int, default=MAX_CHARS,
                    help=f"longest sentence accepted, in characters (default {MAX_CHARS})")
    ap.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT,
                    metavar="SECONDS",
                    help="seconds a client has to send its request, and to take the "
                         f"answer (default {DEFAULT_TIMEOUT:g})")
    ap.add_argument("--max-connections", type=positive_int, default=MAX_CONNECTIONS,
                    metavar="N",
                    help="connections served at once; more get a 503 answer (default "
                         f"{MAX_CONNECTIONS})")
    ap.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    ap.add_argument("--cell-module", action="append", default=[], metavar="MODULE",
                    help=CELL_MODULE_HELP)
    ap.add_argument("--log-level", default="WARNING",
                    choices=LOG_LEVELS)
    ap.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO",
                    help="= --log-level INFO (logs every request)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    set_openmp_wait_policy()  # read by libgomp when torch loads: before any torch import
    from gnn_treelstm.cells.registry import import_cell_modules

    a = build_parser().parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if a.threads is not None:
            import torch

            torch.set_num_threads(a.threads)
        import_cell_modules(a.cell_module)
        explorer = load_explorer(a.run, checkpoint=a.checkpoint, spacy_model=a.spacy_model,
                                 engine=a.engine, max_chars=a.max_chars)
        try:
            server = make_server(explorer, a.host, a.port, timeout=a.timeout,
                                 max_connections=a.max_connections)
        except OSError as exc:
            raise ValueError(f"cannot listen on {a.host}:{a.port} ({exc.strerror or exc}); "
                             "pick another --port, or 0 for any free one") from exc
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host, port_ = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {a.run} on http://{shown}:{port_}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("interrupted; shutting down")
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
