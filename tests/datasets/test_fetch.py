import gzip
import hashlib
import http.server
import io
import threading
import zipfile
from functools import partial
from pathlib import Path

import pytest

from gnn_treelstm.commands.fetch import main as fetch_main
from gnn_treelstm.datasets import fetch as F

TRAIN = "(3 (2 It) (4 good))\n"
DEV = "(1 (2 a) (0 bad))\n"
TEST = "(2 (2 so) (2 so))\n"
TREC = "DESC:manner How did serfdom develop ?\nLOC:city What is the sister\xf0city ?\n"
SICK = "pair_ID\tsentence_A\r\n1\tA dog runs .\r\n"


def make_zip(path: Path, members: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """A local HTTP server on 127.0.0.1 (ephemeral port) serving tmp_path/www."""
    root = tmp_path / "www"
    root.mkdir()
    make_zip(root / "trainDevTestTrees_PTB.zip",
             {"trainDevTestTrees_PTB/trees/train.txt": TRAIN,
              "trainDevTestTrees_PTB/trees/dev.txt": DEV,
              "trainDevTestTrees_PTB/trees/test.txt": TEST})
    make_zip(root / "SICK.zip", {"SICK.txt": SICK, "readme.txt": "x"})
    (root / "train_5500.label").write_bytes(TREC.encode("latin-1"))
    requests: list[str] = []
    handler = type("H", (_Handler,), {"requests": requests})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            partial(handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests, root
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_fetch_zip_unpacks_and_skips_second_run(server, tmp_path):
    url, requests, _ = server
    dest = tmp_path / "data"
    status = F.fetch(dest, ["sst", "sick-full"], base_url=url)
    assert status == {"sst": "fetched", "sick-full": "fetched"}
    assert (dest / "sst/trees/train.txt").read_text() == TRAIN
    assert (dest / "sst/trees/test.txt").read_text() == TEST
    # SICK.txt is kept gzip-compressed as in the mirror, bytes (CRLF) untouched
    with gzip.open(dest / "sick/full/SICK.txt.gz", "rb") as fh:
        assert fh.read() == SICK.encode()
    assert not (dest / ".downloads").exists()  # archives removed after unpacking
    assert not list(dest.rglob("*.part")) and not list(dest.rglob("*.tmp"))
    assert sorted(requests) == ["/SICK.zip", "/trainDevTestTrees_PTB.zip"]

    assert F.fetch(dest, ["sst"], base_url=url) == {"sst": "present"}
    assert len(requests) == 2  # nothing downloaded again
    (dest / "sst/trees/dev.txt").write_text("changed")
    assert F.fetch(dest, ["sst"], base_url=url, force=True) == {"sst": "fetched"}
    assert len(requests) == 3 and (dest / "sst/trees/dev.txt").read_text() == DEV


def test_plain_file_with_checksum(server, tmp_path):
    url, _, root = server
    data = (root / "train_5500.label").read_bytes()
    res = F.Resource("trec-train", "trec", "https://example.org/x/train_5500.label",
                     {"": "trec/train_5500.label"}, sha256=hashlib.sha256(data).hexdigest())
    st = F.fetch(tmp_path / "d", ["trec"], base_url=url, resources=[res], progress=True)
    assert st == {"trec-train": "fetched"}
    assert (tmp_path / "d/trec/train_5500.label").read_bytes() == data  # latin-1 byte kept


def test_checksum_mismatch_is_clear_and_leaves_nothing(server, tmp_path):
    url, _, _ = server
    dest = tmp_path / "d"
    # the real table pins the official TREC checksum; the test server serves other bytes
    with pytest.raises(F.FetchError, match=r"train_5500.label: checksum mismatch: expected "
                                           r"sha256 9e4c8bdc"):
        F.fetch(dest, ["trec-train"], base_url=url)
    assert not (dest / "trec").exists()
    assert not [p for p in dest.rglob("*") if p.is_file()]


def test_404_is_clear(server, tmp_path):
    url, _, _ = server
    with pytest.raises(F.FetchError, match=r"snli_1.0.zip: HTTP 404"):
        F.fetch(tmp_path / "d", ["snli"], base_url=url)
    assert not [p for p in (tmp_path / "d").rglob("*") if p.is_file()]


def test_unreachable_host(tmp_path):
    with pytest.raises(F.FetchError, match="cannot reach the server.*--from"):
        F.download("http://127.0.0.1:9/none.zip", tmp_path / "x.zip", timeout=2)


def test_missing_member_in_archive(server, tmp_path):
    url, _, _ = server
    res = F.Resource("sst", "sst", "https://x/trainDevTestTrees_PTB.zip",
                     {"trees/absent.txt": "sst/absent.txt"}, archive=True)
    with pytest.raises(F.FetchError, match="no member 'trees/absent.txt'"):
        F.fetch(tmp_path / "d", ["sst"], base_url=url, resources=[res])


def test_unknown_dataset_and_urls():
    with pytest.raises(ValueError, match="unknown dataset"):
        F.fetch("unused", ["imdb"])
    sst = next(r for r in F.RESOURCES if r.name == "sst")
    assert F.resolve_url(sst) == "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip"
    assert F.resolve_url(sst, "http://h:1/m/") == "http://h:1/m/trainDevTestTrees_PTB.zip"
    assert set(F.DEFAULT_GROUPS) <= set(F.GROUPS)


def _mirror(tmp_path: Path) -> Path:
    m = tmp_path / "mirror"
    (m / "trec").mkdir(parents=True)
    (m / "snli").mkdir()
    (m / "trec/TREC_10.label").write_text("NUM:date When ?\n")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        gz.write(b"entailment\n")
    (m / "snli/labels.dev.gz").write_bytes(buf.getvalue())
    (m / "README.md").write_text("# mirror\n")
    make_zip(m / "trainDevTestTrees_PTB.zip", {"trees/train.txt": TRAIN, "trees/dev.txt": DEV,
                                               "trees/test.txt": TEST})
    sums = []
    for p in sorted(m.rglob("*")):
        if p.is_file():
            rel = p.relative_to(m).as_posix()
            sums.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {rel}")
    (m / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return m


def test_copy_from_mirror(tmp_path):
    m = _mirror(tmp_path)
    dest = tmp_path / "data"
    st = F.copy_from_mirror(m, dest)
    assert st["trec/TREC_10.label"] == "copied" and st["SHA256SUMS"] == "copied"
    assert st["trainDevTestTrees_PTB.zip"] == "unpacked"
    assert (dest / "snli/labels.dev.gz").read_bytes() == (m / "snli/labels.dev.gz").read_bytes()
    assert (dest / "sst/trees/dev.txt").read_text() == DEV
    again = F.copy_from_mirror(m, dest)
    assert set(again.values()) == {"present"}
    assert set(F.copy_from_mirror(m, dest, force=True).values()) == {"copied", "unpacked"}


def test_copy_from_mirror_checksum_mismatch(tmp_path):
    m = _mirror(tmp_path)
    (m / "trec/TREC_10.label").write_text("NUM:date Damaged ?\n")
    dest = tmp_path / "data"
    with pytest.raises(F.FetchError, match=r"TREC_10.label: checksum mismatch with SHA256SUMS"):
        F.copy_from_mirror(m, dest)
    assert not (dest / "trec/TREC_10.label").exists()
    assert not list(dest.rglob("*.tmp"))
    st = F.copy_from_mirror(m, tmp_path / "d2", verify=False)
    assert st["trec/TREC_10.label"] == "copied"


def test_copy_from_mirror_missing_listed_file(tmp_path):
    m = _mirror(tmp_path)
    (m / "README.md").unlink()
    with pytest.raises(F.FetchError, match="missing.*README.md"):
        F.copy_from_mirror(m, tmp_path / "data")


def test_cli(server, tmp_path, capsys):
    url, _, _ = server
    dest = tmp_path / "data"
    assert fetch_main(["--dest", str(dest), "--datasets", "sst", "--base-url", url,
                   "--quiet"]) == 0
    assert (dest / "sst/trees/train.txt").is_file()
    assert "1 fetched" in capsys.readouterr().out
    assert fetch_main(["--dest", str(dest), "--datasets", "snli", "--base-url", url,
                   "--quiet"]) == 1
    assert "HTTP 404" in capsys.readouterr().err
    assert fetch_main(["--list"]) == 0
    assert "trainDevTestTrees_PTB.zip" in capsys.readouterr().out
    m = _mirror(tmp_path)
    assert fetch_main(["--from", str(m), "--dest", str(tmp_path / "copy"), "--quiet"]) == 0
    assert (tmp_path / "copy/trec/TREC_10.label").is_file()


def test_copy_real_mirror(shared_data, tmp_path):
    st = F.copy_from_mirror(shared_data, tmp_path / "data")
    assert st["sst/trees/train.txt"] == "copied"
    assert (tmp_path / "data/glove/glove.6B.50d.filtered.txt.gz").is_file()
    assert sum(1 for _ in (tmp_path / "data").rglob("*") if _.is_file()) == len(st)
