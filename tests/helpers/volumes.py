"""Small real volumes for disk-full tests and benchmarks: tmpfs mounts (root only).

A tmpfs has a hard size the kernel enforces (ENOSPC past it), can be grown in place
(`mount -o remount,size=`), and statvfs reports it like any file system, so a node's
data directory on one behaves as on a small disk, and "space returns" is one remount
or one deleted filler file. Every mount is undone by the context manager, also when
the test fails (a lazy unmount if a process still holds a file there).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator

FILLER = ".filler"


def can_mount() -> str | None:
    """None when this process can mount a tmpfs, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    probe = f"/tmp/raftsink-mount-probe-{uuid.uuid4().hex[:8]}"
    os.makedirs(probe)
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            return f"cannot mount a tmpfs here: {r.stderr.strip()}"
        subprocess.run(["umount", probe], check=True)
        return None
    finally:
        os.rmdir(probe)


class TmpfsVolume:
    """A tmpfs of size_bytes mounted at path (which must be empty or absent)."""

    def __init__(self, path: str, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> None:
        os.makedirs(self.path, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", self.path],
            check=True,
        )
        self.mounted = True

    def resize(self, size_bytes: int) -> None:
        """Grow (or shrink) the volume in place: the processes using it see the new size."""
        subprocess.run(["mount", "-o", f"remount,size={size_bytes}", self.path], check=True)
        self.size_bytes = size_bytes

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill_to(self, free_bytes: int) -> int:
        """Write a filler file until about free_bytes are left; returns its size."""
        want = self.free_bytes() - free_bytes
        path = os.path.join(self.path, FILLER)
        chunk = b"\0" * (1 << 20)
        written = 0
        with open(path, "ab") as f:
            while written < want:
                n = min(len(chunk), want - written)
                f.write(chunk[:n])
                written += n
        return written

    def remove_filler(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, FILLER))

    def unmount(self) -> None:
        if not self.mounted:
            return
        r = subprocess.run(["umount", self.path], capture_output=True)
        if r.returncode != 0:  # still busy (a process not yet reaped): detach it anyway
            subprocess.run(["umount", "-l", self.path], check=True)
        self.mounted = False


@contextlib.contextmanager
def tmpfs_volumes(paths: list[str], size_bytes: int) -> Iterator[list[TmpfsVolume]]:
    """Mount one tmpfs per path; unmount them all on exit, whatever happened."""
    vols = [TmpfsVolume(p, size_bytes) for p in paths]
    try:
        for v in vols:
            v.mount()
        yield vols
    finally:
        errors = []
        for v in vols:
            try:
                v.unmount()
            except Exception as exc:  # keep unmounting the others
                errors.append(exc)
        if errors:
            raise errors[0]
