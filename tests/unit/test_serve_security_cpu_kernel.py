"""The CPU decode kernel is loaded only from a folder and a file this user alone can write: another local user who
plants ``paged_decode_<key>.so`` (a name anyone can compute) where the kernel is cached — the shared-temp fallback
of a read-only home, above all — must not get their code run as the server's user."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from accelkit.serve.attention import cpu as cpu_attention

CC = os.environ.get("CC") or "cc"
pytestmark = pytest.mark.skipif(shutil.which(shlex.split(CC)[0]) is None,
                                reason="no C compiler here to build the CPU decode kernel (`apt-get install gcc`)")
IS_ROOT = hasattr(os, "getuid") and os.getuid() == 0
NOBODY = 65534


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No kernel loaded yet; a home cache that cannot be created (XDG_CACHE_HOME under a file), a temp folder of the
    test's own (sticky and world-writable, as /tmp is). Returns the temp folder."""
    monkeypatch.setattr(cpu_attention, "_kernel", None)
    monkeypatch.setattr(cpu_attention, "_kernel_problem", None)
    monkeypatch.setenv("CC", CC)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file" / "cache"))
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def _plant(folder: Path, marker: Path) -> Path:
    """A kernel file under the name accelkit would load, whose constructor writes ``marker``."""
    source = marker.parent / "evil.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) { FILE *f = '
                      f'fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }} }}\n'
                      "int accelkit_paged_decode_f32(void) { return 0; }\n")
    target = folder / cpu_attention.kernel_file_name(shlex.split(CC))
    subprocess.run([*shlex.split(CC), "-shared", "-fPIC", "-o", str(target), str(source)], check=True)
    return target


def _fallback(shared: Path) -> Path:
    return shared / f"accelkit-{os.getuid()}"


@pytest.mark.parametrize("owner", ["another user", "this user, mode 0777"])
def test_a_kernel_planted_in_the_shared_temp_fallback_is_never_loaded(fresh, tmp_path, caplog, owner):
    if owner == "another user" and not IS_ROOT:
        pytest.skip("making a folder another user owns needs root")
    folder = _fallback(fresh)
    folder.mkdir()
    marker = tmp_path / "marker"
    planted = _plant(folder, marker)
    if owner == "another user":
        os.chown(folder, NOBODY, NOBODY)
        os.chown(planted, NOBODY, NOBODY)
    else:
        os.chmod(folder, 0o777)
    kernel, problem = cpu_attention.decode_kernel()
    assert not marker.exists(), "the planted kernel was loaded"
    assert problem is None and kernel is not None  # built for this process instead: still the fast path
    assert str(folder) in caplog.text and ("uid 65534" in caplog.text or "writable by other users" in caplog.text)
    assert sorted(p.name for p in fresh.iterdir()) == [folder.name]  # the private build folder is gone again


@pytest.mark.skipif(not IS_ROOT, reason="a file another user owns in this user's folder needs root to make")
def test_a_planted_kernel_file_in_this_users_own_folder_is_rebuilt_not_loaded(fresh, tmp_path):
    folder = _fallback(fresh)
    folder.mkdir(mode=0o700)
    marker = tmp_path / "marker"
    planted = _plant(folder, marker)
    os.chown(planted, NOBODY, NOBODY)
    kernel, problem = cpu_attention.decode_kernel()
    assert not marker.exists() and problem is None and kernel is not None
    assert planted.stat().st_uid == os.getuid()  # replaced by this user's own build


def test_a_symlinked_fallback_folder_is_not_used(fresh, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    marker = tmp_path / "marker"
    _plant(elsewhere, marker)
    _fallback(fresh).symlink_to(elsewhere)
    kernel, problem = cpu_attention.decode_kernel()
    assert not marker.exists() and problem is None and kernel is not None


def test_the_fallback_is_made_private_and_its_kernel_reused(fresh):
    """The safe case stays fast: the folder is made 0700, the kernel built there once and loaded from it again."""
    assert cpu_attention.decode_kernel()[1] is None
    folder = _fallback(fresh)
    assert (folder.stat().st_mode & 0o777) == 0o700
    (built,) = folder.iterdir()
    assert built.stat().st_mode & 0o022 == 0
    before = built.stat().st_mtime_ns
    cpu_attention._kernel = None  # (the fixture puts it back)
    assert cpu_attention.decode_kernel()[1] is None
    assert built.stat().st_mtime_ns == before  # loaded, not built again
