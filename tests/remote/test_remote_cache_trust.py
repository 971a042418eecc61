"""remote.cache and remote.cachedir: what the page cache trusts, and what it never waits on.

* A page planted in the cache with other labels and a CRC-32 forged to match (what anyone who can
  write a file there can make) is not served: the loader, ``validate()`` and ``ds[i]`` read the true
  data, downloaded again, and the good copy replaces the planted file.
* The cache folder is private: made 0700 with 0600 files, so another user can neither read a page nor
  write one (checked with a real other user, as root); a folder of another user, or one that others can
  write, is refused with a message that names it, its owner and mode, and the fix.
* A FIFO, link or folder under an entry's name is a miss, never a wait (in a child with a deadline).
* A cache on a read-only file system serves every page from memory (a real read-only mount, in a mount
  namespace of its own, where the machine allows one), and still reads pages sealed before.

The store is a real one with no server: the local file system through pyarrow (``filesystem=``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SRC, assert_same, run_python

import slipstream as ss
from slipstream import fields as F
from slipstream.files.folder import parse_index
from slipstream.remote.cache import PageCache
from slipstream.remote.fetch import range_key

pa = pytest.importorskip("pyarrow")
pafs = pytest.importorskip("pyarrow.fs")

CHILD_LIMIT = 120.0  # a child's deadline: it takes about two seconds; past this, it hangs

_FIELDS = {"label": F.Int(), "x": F.Array("float32", (16,))}


def _write(folder: Path) -> Path:
    samples = [{"label": k, "x": np.full(16, k, np.float32)} for k in range(40)]
    return ss.write(folder, samples, _FIELDS, progress=False, page_size=600, shard_size=3000)


def _open(folder: Path, cache_dir: Path) -> Any:
    return ss.open(str(folder), filesystem=pafs.LocalFileSystem(), cache_dir=cache_dir)


def _pages(folder: Path) -> list[tuple[str, bytes, int, Any]]:
    """(cache key, stored bytes, checksum, schema) of every page of the dataset at ``folder``, read as ``_open`` reads it."""
    raw_index = (folder / "index.json").read_bytes()
    index, out = json.loads(raw_index), []
    schema = parse_index(raw_index, str(folder / "index.json"))["schema"]
    for shard in index["shards"]:
        blob = (folder / shard["file"]).read_bytes()
        url = str(folder).rstrip("/") + "/" + shard["file"]
        for offset, length, _, _, crc in shard["pages"]:
            out.append((range_key(url, offset, offset + length, crc), blob[offset : offset + length], crc, schema))
    return out


def _checksum(schema: Any) -> Callable[[bytes], int]:
    """The check a remote read applies to a page's bytes: the CRC-32 of its record batch, re-serialized."""
    import pyarrow.ipc  # noqa: F401

    return lambda data: zlib.crc32(pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(data)), schema).serialize())


def forge(page: bytes, schema: Any, crc: int, labels: range, to: range) -> bytes:
    """``page`` with labels ``labels`` changed to ``to`` and the CRC-32 that the index records still matching:
    four bytes of the last row's ``x`` are chosen to make it so (the CRC is affine in the bytes: 32 flips and
    a 32x32 solve over GF(2))."""
    check = _checksum(schema)
    old, new = np.asarray(labels, "<i8").tobytes(), np.asarray(to, "<i8").tobytes()
    assert page.count(old) == 1
    data = bytearray(page.replace(old, new))
    at = bytes(data).index(np.full(16, labels[-1], "<f4").tobytes()) + 8  # inside the last row's x values
    base = check(bytes(data))
    rows: list[tuple[int, int]] = []  # (vector, which flips make it), distinct leading bits, largest first
    for bit in range(32):
        flipped = bytearray(data)
        flipped[at + bit // 8] ^= 1 << (bit % 8)
        vector, mask = check(bytes(flipped)) ^ base, 1 << bit
        for row, row_mask in rows:
            if vector ^ row < vector:
                vector, mask = vector ^ row, mask ^ row_mask
        if vector:
            rows = sorted([*rows, (vector, mask)], reverse=True)
    want, mask = base ^ crc, 0
    for row, row_mask in rows:
        if want ^ row < want:
            want, mask = want ^ row, mask ^ row_mask
    assert want == 0, "no four bytes there can fix the CRC"
    for bit in range(32):
        if mask >> bit & 1:
            data[at + bit // 8] ^= 1 << (bit % 8)
    forged = bytes(data)
    assert check(forged) == crc and forged != page
    return forged


def _labels(ds: Any) -> list[int]:
    return [int(ds[i]["label"]) for i in range(len(ds))]


# ------------------------------------------------------------------------------------ forged pages


@pytest.mark.parametrize("tail", ["bare", "guessed seal"])
def test_a_planted_page_with_a_forged_crc_is_not_served_to_validate_the_loader_or_a_read(tmp_path: Path, tail: str) -> None:
    folder = _write(tmp_path / "ds")
    local = ss.open(folder)
    pages = _pages(folder)
    cache_dir = tmp_path / "cache"
    remote = _open(folder, cache_dir)
    planted = {}
    first = 0
    for key, page, crc, schema in pages[:3]:  # the first three pages, labels moved by 1000
        n = int(pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(page)), schema).num_rows)
        forged = forge(page, schema, crc, range(first, first + n), range(first + 1000, first + 1000 + n))
        assert _checksum(schema)(forged) == crc  # what the loader checks a cached page against
        path = cache_dir / "pages" / f"{key}.page"
        path.write_bytes(forged + (os.urandom(32) if tail == "guessed seal" else b""))
        planted[key] = (path, page)
        first += n
    remote.validate()  # reads every page, through the cache
    assert _labels(remote) == list(range(40)), "a planted page was served"
    with ss.DataLoader(remote, 8, workers=2) as loader:
        assert [int(v) for b in loader for v in b["label"]] == list(range(40))
    for i in range(len(local)):
        assert_same(remote[i], local[i], f"sample {i}")
    cache = PageCache(cache_dir / "pages", 10**9)
    for key, (path, page) in planted.items():  # each planted file replaced by the good page, downloaded again
        assert bytes(cache.get(key, len(page))) == page
        assert path.stat().st_size == len(page) + 32


def test_a_page_sealed_by_the_cache_is_served_and_one_changed_after_is_not(tmp_path: Path) -> None:
    cache = PageCache(tmp_path / "c", 10_000)
    assert cache.put("k", b"0123456789")
    assert bytes(cache.get("k", 10)) == b"0123456789"
    path = tmp_path / "c" / "k.page"
    body = bytearray(path.read_bytes())
    body[3] ^= 1  # one bit of the page, its seal left as it was
    path.write_bytes(bytes(body))
    assert cache.get("k", 10) is None and cache.rejected == 1
    assert PageCache(tmp_path / "c", 10_000).get("k", 10) is None  # every process checks with the same key
    assert cache.put("k", b"0123456789") and bytes(PageCache(tmp_path / "c", 10_000).get("k", 10)) == b"0123456789"


def test_a_page_is_checked_once_per_process_until_its_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slipstream.remote import cache as cache_module

    checked: list[str] = []
    real = cache_module.seal
    monkeypatch.setattr(cache_module, "seal", lambda key, name, data: (checked.append(name), real(key, name, data))[1])
    cache = PageCache(tmp_path / "c", 10_000)
    assert cache.put("k", b"0123456789")
    checked.clear()
    assert [bytes(cache.get("k", 10)) for _ in range(3)] == [b"0123456789"] * 3
    assert checked == ["k.page"]  # the first read checks the seal, the next two know the file
    path = tmp_path / "c" / "k.page"
    shown = path.stat()
    forged = bytearray(path.read_bytes())
    forged[3] ^= 1
    (tmp_path / "c" / "planted").write_bytes(bytes(forged))
    os.utime(tmp_path / "c" / "planted", ns=(shown.st_atime_ns, shown.st_mtime_ns))  # the same time, another file
    os.replace(tmp_path / "c" / "planted", path)
    assert cache.get("k", 10) is None and cache.rejected == 1 and checked == ["k.page"] * 2


def test_processes_sharing_a_cache_accept_each_others_pages(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    code = """
        import sys
        from slipstream.remote.cache import PageCache
        cache = PageCache(sys.argv[1], 10**6)
        for k in range(20):
            cache.put(f"{sys.argv[2]}{k}", bytes([k]) * (100 + k))
        print(sum(cache.get(f"{w}{k}", 100 + k) is not None for w in "abc" for k in range(20)))
    """
    results = [run_python(code, timeout=CHILD_LIMIT, argv=[str(folder), w]) for w in "abc"]
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    cache = PageCache(folder, 10**6)
    assert all(bytes(cache.get(f"{w}{k}", 100 + k)) == bytes([k]) * (100 + k) for w in "abc" for k in range(20))
    assert int(results[-1].stdout) >= 40  # the last one saw its own pages and at least one other's
    assert stat.S_IMODE((folder / ".key").stat().st_mode) == 0o600


# ------------------------------------------------------------------------------------ private folders


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.lstat().st_mode) for p in folder.iterdir()}


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every user may enter (unlike pytest's tmp_path), so another user's reach is what the cache allows."""
    folder = Path(tempfile.mkdtemp(prefix="slipstream-trust-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_cache_folder_and_its_files_are_made_private(open_tmp: Path) -> None:
    folder = _write(open_tmp / "ds")
    remote = _open(folder, open_tmp / "cache")
    _labels(remote)
    pages = open_tmp / "cache" / "pages"
    assert stat.S_IMODE(pages.stat().st_mode) == stat.S_IMODE(pages.parent.stat().st_mode) == 0o700  # and the cache_dir
    modes = _modes(pages)
    assert len([n for n in modes if n.endswith(".page")]) == len(_pages(folder))
    assert set(modes.values()) == {0o600}, modes  # pages, the key and the lock


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_can_neither_read_nor_write_the_cache(open_tmp: Path) -> None:
    folder = _write(open_tmp / "ds")
    _labels(_open(folder, open_tmp / "cache"))
    pages = open_tmp / "cache" / "pages"
    page = next(p for p in pages.iterdir() if p.name.endswith(".page"))

    def as_nobody(*argv: str) -> subprocess.CompletedProcess:
        def drop() -> None:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)

        got = subprocess.run(argv, capture_output=True, timeout=CHILD_LIMIT, preexec_fn=drop)  # noqa: PLW1509
        return subprocess.CompletedProcess(argv, got.returncode, got.stdout, got.stderr.decode(errors="replace"))

    assert as_nobody("/bin/ls", str(open_tmp)).returncode == 0  # (the user does reach the cache's parent)
    for argv in (["/bin/cat", str(page)], ["/bin/ls", str(pages)], ["/usr/bin/touch", str(pages / "planted.page")]):
        got = as_nobody(*argv)
        assert got.returncode != 0 and "Permission denied" in got.stderr, (argv, got)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o702])
def test_a_cache_folder_others_can_write_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    pages = tmp_path / "cache" / "pages"
    pages.mkdir(parents=True)
    pages.chmod(mode)
    for make in (lambda: PageCache(pages, 10**6), lambda: _open(_write(tmp_path / "ds"), tmp_path / "cache")):
        with pytest.raises(PermissionError) as caught:
            make()
        message = str(caught.value)
        assert str(pages) in message and f"{mode:04o}" in message  # what is refused, and why
        assert f"chmod 700 {pages}" in message and "SLIPSTREAM_CACHE_DIR" in message  # the fixes


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_cache_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    pages = tmp_path / "pages"
    pages.mkdir(mode=0o700)
    os.chown(pages, 4242, 4242)
    with pytest.raises(PermissionError, match=r"belongs to uid 4242 .*mode 0700, not to this user \(uid 0\).*CACHE_DIR"):
        PageCache(pages, 10**6)


def test_a_cache_folder_of_ours_that_others_could_read_is_made_private(tmp_path: Path) -> None:
    pages = tmp_path / "pages"
    pages.mkdir()
    pages.chmod(0o755)  # as slipstream made it before
    cache = PageCache(pages, 10**6)
    assert stat.S_IMODE(pages.stat().st_mode) == 0o700
    assert cache.put("a", b"abc") and bytes(cache.get("a", 3)) == b"abc"


# ------------------------------------------------------------------------------------ entries that are not files

_ODD_ENTRY = r"""
import json, sys
import pyarrow.fs as pafs
import slipstream as ss

remote = ss.open(sys.argv[1], filesystem=pafs.LocalFileSystem(), cache_dir=sys.argv[2])
labels = [int(remote[i]["label"]) for i in range(len(remote))]
remote.validate()
with ss.DataLoader(remote, 8, workers=2) as loader:
    loaded = [int(v) for b in loader for v in b["label"]]
print(json.dumps({"labels": labels, "loaded": loaded}), flush=True)
"""


@pytest.mark.timeout(2 * CHILD_LIMIT)
@pytest.mark.parametrize(
    "kind, name",
    [("fifo", "page"), ("link", "page"), ("folder", "page"), ("fifo", ".key"), ("fifo", ".lock"), ("link", ".key")],
)
def test_a_fifo_link_or_folder_in_the_cache_is_a_miss_not_a_hang(tmp_path: Path, kind: str, name: str) -> None:
    folder = _write(tmp_path / "ds")
    key, page, _, _ = _pages(folder)[0]
    cache_dir = tmp_path / "cache"
    pages = cache_dir / "pages"
    PageCache(pages, 10**6)  # the folder, its key and its lock: then the odd entry in place of one of them
    (pages / ".key").unlink()
    (pages / ".lock").unlink(missing_ok=True)
    where = pages / (f"{key}.page" if name == "page" else name)
    target = tmp_path / "elsewhere.page"
    target.write_bytes(page)  # a link's target: the page's true bytes, at a name the cache does not own
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "link":
        where.symlink_to(target)
    else:
        where.mkdir()
    try:
        got = run_python(_ODD_ENTRY, timeout=CHILD_LIMIT, argv=[str(folder), str(cache_dir)])
    except subprocess.TimeoutExpired:
        pytest.fail(f"a read waited on a {kind} at {where.name} for {CHILD_LIMIT} s")
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout.splitlines()[-1])
    assert result == {"labels": list(range(40)), "loaded": list(range(40))}
    if name == "page" and kind != "folder":  # replaced by the page, downloaded again
        assert where.is_file() and not where.is_symlink() and where.stat().st_size == len(page) + 32
    if name == ".key":  # replaced by a key of the cache's own
        assert where.is_file() and not where.is_symlink() and stat.S_IMODE(where.stat().st_mode) == 0o600
    assert target.read_bytes() == page  # a link's target is never written through


# ------------------------------------------------------------------------------------ read-only file systems

_READ_ONLY = r"""
import json, os, subprocess, sys
import pyarrow.fs as pafs
import slipstream as ss

folder, mount, how = sys.argv[1], sys.argv[2], sys.argv[3]

def epoch(cache_dir):
    remote = ss.open(folder, filesystem=pafs.LocalFileSystem(), cache_dir=cache_dir)
    labels = [int(remote[i]["label"]) for i in range(len(remote))]
    with ss.DataLoader(remote, 8, workers=2) as loader:
        loaded = [int(v) for b in loader for v in b["label"]]
    stats = remote.remote_stats()
    right = labels == loaded == list(range(40))
    return {"labels": right, "loaded": right, "downloads": stats["downloads"], "uncached": stats["uncached"]}

out = {}
os.mkdir(os.path.join(mount, "empty"))
out["warm"] = epoch(os.path.join(mount, "warm"))  # a cache filled while it can be written
if how == "mount":
    subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
else:  # a folder this user cannot write (a user other than root)
    for sub in ("", "empty", "warm", "warm/pages"):
        os.chmod(os.path.join(mount, sub), 0o500)
out["empty"] = epoch(os.path.join(mount, "empty"))  # no pages folder, and none can be made
out["missing"] = epoch(os.path.join(mount, "missing", "deeper"))  # no cache_dir either
out["read_only_warm"] = epoch(os.path.join(mount, "warm"))
print(json.dumps(out), flush=True)
"""


def _read_only_runner(tmp_path: Path, how: str) -> list[str]:
    mount = tmp_path / "mount"
    mount.mkdir()
    if how == "unwritable":
        return []
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only mount needs root and unshare")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.decode().strip()}")
    mounted = f'mount -t tmpfs -o size=16m tmpfs "{mount}" && exec "$@"'  # (in the namespace: gone with it)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", mounted, "sh"]


@pytest.mark.timeout(2 * CHILD_LIMIT)
@pytest.mark.parametrize("how", ["mount", "unwritable"])
def test_a_cache_that_cannot_be_written_serves_pages_from_memory(tmp_path: Path, how: str) -> None:
    if how == "unwritable" and os.geteuid() == 0:
        pytest.skip("root writes any folder: the read-only mount covers it")
    folder = _write(tmp_path / "ds")
    prefix = _read_only_runner(tmp_path, how)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [*prefix, sys.executable, "-c", textwrap.dedent(_READ_ONLY), str(folder), str(tmp_path / "mount"), how]
    try:
        got = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_LIMIT, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the read-only run did not end within {CHILD_LIMIT} s")
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout.splitlines()[-1])
    pages = len(_pages(folder))
    assert out["warm"] == {"labels": True, "loaded": True, "downloads": pages, "uncached": 0}
    for name in ("empty", "missing"):
        assert out[name]["labels"] and out[name]["loaded"] and out[name]["uncached"] == out[name]["downloads"] > 0
    # pages sealed while it could be written are still read
    assert out["read_only_warm"] == {"labels": True, "loaded": True, "downloads": 0, "uncached": 0}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a link owned by another user")
def test_a_pages_folder_replaced_by_another_users_link_is_not_followed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"  # a cache_dir others can write (a team's cache folder, no sticky bit)
    shared.mkdir()
    shared.chmod(0o777)
    victim = tmp_path / "home"  # a folder of this user's, elsewhere
    victim.mkdir()
    victim.chmod(0o755)
    (victim / "draft.tmp").write_text("this user's work")
    link = shared / "pages"
    link.symlink_to(victim)  # planted by uid 4242
    os.lchown(link, 4242, 4242)
    with pytest.raises(PermissionError, match="symbolic link"):
        PageCache(link, 10**6)
    assert (victim / "draft.tmp").exists(), "the cache deleted a file in the folder another user's link pointed it at"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755, "the cache changed the mode of the link's target"
    assert not (victim / ".key").exists() and not (victim / "k.page").exists(), "the cache wrote into the link's target"
