"""The cache location and the one atomic-write helper."""

import os

import pytest

from gnn_treelstm import files as F
from gnn_treelstm.trees import vectors as V


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GNN_TREELSTM_CACHE", str(tmp_path / "c"))
    assert F.cache_dir("vectors") == tmp_path / "c" / "vectors"
    monkeypatch.delenv("GNN_TREELSTM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert F.cache_dir() == tmp_path / "home" / ".cache" / "gnn_treelstm"


def test_vector_cache_is_never_written_next_to_the_data(monkeypatch, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    src = data / "vecs.txt"
    src.write_text("a 1 2\nb 3 4\n")
    monkeypatch.setenv("GNN_TREELSTM_CACHE", str(tmp_path / "cache"))
    V.load_vectors(src)
    assert sorted(p.name for p in data.iterdir()) == ["vecs.txt"]
    cached = list((tmp_path / "cache" / "vectors").glob("vecs.txt.*.vectors.npz"))
    assert len(cached) == 1 and V.cache_path_for(src) == cached[0]


@pytest.mark.parametrize("content", [b"bytes\x00", "text é", lambda f: f.write(b"writer")])
def test_atomic_write_kinds(tmp_path, content):
    path = F.atomic_write(tmp_path / "sub" / "out.bin", content)
    want = {bytes: content, str: "text é".encode()}.get(type(content), b"writer")
    assert path.read_bytes() == want
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert [p.name for p in path.parent.iterdir()] == ["out.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = F.atomic_write(tmp_path / "out.txt", "old")

    def boom(f):
        f.write(b"half of the new")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        F.atomic_write(path, boom)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with pytest.raises(RuntimeError), F.atomic_path(path) as tmp:
        tmp.write_text("new")
        raise RuntimeError("the compiler failed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with F.atomic_path(path, mode=0o755) as tmp:
        tmp.write_text("new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o755


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_append_whole_cuts_a_failed_append_back(tmp_path, monkeypatch):
    import errno

    path = tmp_path / "log.jsonl"
    F.append_whole(path, '{"epoch": 1}\n')
    real_write, calls = os.write, []

    def short_then_full(fd, data):  # half the line goes out, then the disk is full
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(F.os, "write", short_then_full)
    with pytest.raises(OSError, match="No space left"):
        F.append_whole(path, '{"epoch": 2, "loss": 0.5}\n')
    monkeypatch.setattr(F.os, "write", real_write)
    assert path.read_text() == '{"epoch": 1}\n' and len(calls) == 2
    F.append_whole(path, '{"epoch": 2}\n')
    assert path.read_text() == '{"epoch": 1}\n{"epoch": 2}\n'


def _zip_writer_failure(room: int):
    """A writer that fails as torch's zip writer does on a full disk: its file raises
    ``ENOSPC`` after ``room`` bytes, the writer then raises a ``RuntimeError`` of its own
    (the ``OSError`` is its ``__context__``)."""
    import errno

    def write(f):
        try:
            f.write(b"x" * room)
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                               "704 vs 598") from None
    return write


def test_a_write_failing_for_want_of_space_is_no_space_error(tmp_path):
    path = F.atomic_write(tmp_path / "state.pt", b"old")
    with pytest.raises(F.NoSpaceError) as info:
        F.atomic_write(path, _zip_writer_failure(3000))
    err = info.value
    assert isinstance(err, OSError) and err.errno == 28 and err.written == 3000
    assert isinstance(err.__cause__, RuntimeError)
    msg = str(err)
    assert msg.startswith(f"cannot write {path}: no space left on the disk that holds it (")
    assert " free; the write stopped after 2.9 KiB) (the writer said: RuntimeError: " in msg
    assert "Free some space or write to another disk" in msg
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_a_writer_error_without_oserror_on_a_nearly_full_disk(tmp_path, monkeypatch):
    """DGL's save_graphs raises its own error with no OSError: the free space decides."""
    path = tmp_path / "train.bin"

    class DGLError(Exception):
        pass

    def dgl_like(f):
        f.write(b"graph bytes")
        raise DGLError("[07:00:00] local_filesys.cc:38: Check failed: FileStream.Write "
                       "incomplete\nStack trace:\n  [bt] (0) libdgl.so")

    with pytest.raises(DGLError):  # plenty of space: the writer's own error
        F.atomic_write(path, dgl_like)
    usage = F.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(F.shutil, "disk_usage",
                        lambda p: usage._replace(free=F.FULL_BELOW - 1))
    with pytest.raises(F.NoSpaceError, match=r"the writer said: DGLError: .*Write incomplete\)"
                       ) as info:
        F.atomic_write(path, dgl_like)
    assert "[bt]" not in str(info.value) and "1024.0 KiB free" in str(info.value)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_a_real_full_disk_raises_no_space_error(tmp_path):
    from tests.disks import fill, small_filesystem

    with small_filesystem(tmp_path / "small", "1m") as disk:
        F.atomic_write(disk / "keep.bin", b"old")
        fill(disk, leave=8192)
        with pytest.raises(F.NoSpaceError, match=r"cannot write .*keep\.bin: no space left"):
            F.atomic_write(disk / "keep.bin", b"\1" * 100_000)
        assert (disk / "keep.bin").read_bytes() == b"old"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "keep.bin"]


def test_atomic_dir_replaces_a_directory_whole_or_not_at_all(tmp_path):
    target = tmp_path / "train"
    with F.atomic_dir(target) as tmp:
        (tmp / "a.npy").write_bytes(b"old")
    assert [p.name for p in target.iterdir()] == ["a.npy"]
    with pytest.raises(ValueError, match="bad field"), F.atomic_dir(target) as tmp:
        (tmp / "a.npy").write_bytes(b"new")
        raise ValueError("bad field")
    assert (target / "a.npy").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["train"]
    with F.atomic_dir(target) as tmp:
        (tmp / "b.npy").write_bytes(b"new")
    assert [p.name for p in target.iterdir()] == ["b.npy"]


def test_atomic_dir_failing_for_want_of_space_is_no_space_error(tmp_path):
    target = tmp_path / "train"
    with F.atomic_dir(target) as tmp:
        (tmp / "a.npy").write_bytes(b"old")
    with pytest.raises(F.NoSpaceError) as info, F.atomic_dir(target) as tmp:
        (tmp / "a.npy").write_bytes(b"x" * 700)
        with open(tmp / "b.npy", "wb") as f:
            _zip_writer_failure(300)(f)
    msg = str(info.value)
    assert msg.startswith(f"cannot write {target}: no space left on the disk that holds it (")
    assert "the write stopped after 1000 B" in msg and "RuntimeError" in msg
    assert (target / "a.npy").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["train"]


def test_a_fifo_is_written_into_never_renamed_over(tmp_path):
    """A target that is not a regular file (a FIFO here; a device such as /dev/null the
    same) keeps what it is: ``atomic_write`` writes into it, ``atomic_path`` refuses it."""
    import stat

    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        F.atomic_write(fifo, "through the pipe\n")
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    with pytest.raises(OSError, match=r"not a regular file \(a FIFO\)"):
        with F.atomic_path(fifo):
            pass
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(os.listdir(tmp_path)) == ["out"]


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    F.atomic_write(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def test_a_device_node_is_written_into_never_renamed_over(tmp_path):
    """A character device (a node of the null device, made here so that no system file
    is at stake): what ``bench --json`` does to its target, ``check_writable`` then
    ``write_json``, leaves it the device it was; ``atomic_path`` refuses it."""
    import stat

    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here ({exc})")
    device = os.stat(node).st_rdev
    F.check_writable(node)
    F.write_json(node, {"rows": [1, 2, 3]})
    assert stat.S_ISCHR(os.stat(node).st_mode) and os.stat(node).st_rdev == device
    with pytest.raises(OSError, match=r"not a regular file \(a character device\)"):
        with F.atomic_path(node):
            pass
    assert stat.S_ISCHR(os.stat(node).st_mode) and sorted(os.listdir(tmp_path)) == ["null"]
