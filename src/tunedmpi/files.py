"""The one file layer: every file the project reads that it did not just write itself, every write,
lock and tree copy goes through here (tests/test_files_safe.py fails on an open() elsewhere).

- read_bytes / read_head / read_text / read_lines (read_chunks: a stream): a regular file only,
  checked on the open descriptor (a FIFO is opened without blocking and refused, /dev/zero or a
  folder refused), at most ``limit`` bytes (read_chunks: any size, in bounded chunks),
  text decoded as UTF-8; a refusal is a FileRefused (an InputError and an OSError) naming the file.
- write_atomic / write_atomic_with / write_all_or_none, replaced_by (another program writes the
  temporary file) and locked: atomic.py's, re-exported.
- append_to: a log, appended to, never through a link.
- copy_tree: regular files and folders only (links and special files skipped), bounded.
"""

import os
import stat

from tunedmpi.atomic import (
    locked,
    replaced_by,
    write_all_or_none,
    write_atomic,
    write_atomic_with,
)
from tunedmpi.errors import InputError, OutputError

__all__ = [
    "FileRefused",
    "append_to",
    "copy_tree",
    "locked",
    "read_bytes",
    "read_head",
    "read_chunks",
    "read_lines",
    "read_text",
    "replaced_by",
    "write_all_or_none",
    "write_atomic",
    "write_atomic_with",
]

#: No input of the project comes near this: a bigger one is a mistake (or /dev/zero behind a name).
MAX_BYTES = 256 * 1024 * 1024

KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
}


class FileRefused(InputError, OSError):
    """A file the project will not read: not a regular file, too big, not UTF-8 text. An InputError
    (one line: the file, the problem, the fix) and an OSError, so code that handles an unreadable
    file as an OSError still does."""

    def __init__(self, path, problem, fix="give a regular file of the expected content"):
        InputError.__init__(self, path, None, None, problem, fix)
        self.filename, self.strerror = str(path), problem


def _open(path):
    """A read-only descriptor of ``path`` that is a regular file. O_NONBLOCK: opening a FIFO for
    reading blocks until a writer comes, so it is opened at once and then refused by fstat."""
    fd = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise FileRefused(path, "is %s, not a regular file" % kind)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, limit=MAX_BYTES):
    """The content of the regular file ``path``, refused when it is bigger than ``limit`` bytes
    (checked by reading, not only by its size: /proc files and growing files lie)."""
    fd = _open(path)
    try:
        if os.fstat(fd).st_size > limit:  # refused at once, not after reading it all
            raise FileRefused(path, "is bigger than %d bytes" % limit, "give the right file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        raise FileRefused(
            path, "is bigger than %d bytes" % limit, "give the right file (is it truncated?)"
        )
    finally:
        os.close(fd)


def read_head(path, size):
    """The first ``size`` bytes (or fewer) of the regular file ``path``: enough to recognise it."""
    fd = _open(path)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def read_text(path, limit=MAX_BYTES, errors="strict"):
    """read_bytes decoded as UTF-8; not UTF-8 is refused naming the byte (``errors="replace"``:
    output of other programs, such as logs, where a stray byte is no reason to stop)."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as exc:
        raise FileRefused(
            path, "is not UTF-8 text (byte %d)" % exc.start, "give a text file in UTF-8"
        ) from None


def read_lines(path, limit=MAX_BYTES, errors="strict"):
    """read_text as a list of lines, each with its newline, split at "\n" only (as iterating a
    file gives them, where str.splitlines would also split at U+0085 or U+2028)."""
    parts = read_text(path, limit, errors).split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def read_chunks(path, size=1 << 20):
    """The regular file ``path`` in chunks of at most ``size`` bytes, for inputs read as a stream
    (an exported accounting file of any length): memory stays bounded, nothing is refused for size."""
    fd = _open(path)
    try:
        while True:
            chunk = os.read(fd, size)
            if not chunk:
                return
            yield chunk
    finally:
        os.close(fd)


def append_to(path):
    """A binary file object appending to ``path`` (created if missing), a daemon's log: never
    through a link, and refused when what is there is not a regular file."""
    try:
        fd = os.open(
            str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
    except OSError as exc:
        raise OutputError(path, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileRefused(path, "is not a regular file, so no log")
    return os.fdopen(fd, "ab")


def copy_tree(src, dst, max_bytes=MAX_BYTES, max_files=100000):
    """Copy the folder ``src`` to ``dst`` (which must not exist): folders and regular files only,
    links and special files skipped (a link to '.' or to /etc copies nothing), in all at most
    ``max_files`` files and ``max_bytes`` bytes, else FileRefused. Returns the skipped paths. A
    failed copy (a full disk) raises OutputError naming the file."""
    skipped, budget = [], [max_bytes, max_files]

    def walk(s, d):
        try:
            os.mkdir(d)
        except OSError as exc:
            raise OutputError(d, exc) from exc
        with os.scandir(s) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                target = os.path.join(d, entry.name)
                if entry.is_dir(follow_symlinks=False):
                    walk(entry.path, target)
                elif entry.is_file(follow_symlinks=False):
                    budget[1] -= 1
                    try:
                        data = read_bytes(entry.path, max(budget[0], 0))
                    except FileRefused:
                        raise FileRefused(src, "holds more than %d bytes" % max_bytes) from None
                    budget[0] -= len(data)
                    if budget[1] < 0:
                        raise FileRefused(src, "holds more than %d files" % max_files)
                    _write_new(target, data)
                else:
                    skipped.append(entry.path)

    walk(str(src), str(dst))
    return skipped


def _write_new(path, data):
    """A new file ``path`` (never through an existing name or link) holding data."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(path, exc) from exc
