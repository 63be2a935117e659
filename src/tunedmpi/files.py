"""The one file layer: every file the project reads that it did not just write itself, every write,
lock and tree copy goes through here (tests/test_files_safe.py fails on an open() elsewhere).

- read_bytes / read_head / read_text / read_lines (read_chunks: a stream): a regular file only,
  checked on the open descriptor (a FIFO is opened without blocking and refused, /dev/zero or a
  folder refused), at most ``limit`` bytes (read_chunks: any size, in bounded chunks),
  text decoded as UTF-8; a refusal is a FileRefused (an InputError and an OSError) naming the file.
- write_atomic / write_atomic_with / write_all_or_none: readers see the old file or the new one,
  never half of it. A temporary file is ``.<name>.<8 random characters>.tmp`` beside its target
  (TEMP_NAME), removed when the write fails; only a killed process leaves one, and render finds
  and removes those (stray_temps). A failed write raises errors.OutputError: one line naming the
  file and the fix. replaced_by: another program writes the temporary file.
- locked: an exclusive lock file that says who holds it.
- append_to: a log, appended to, never through a link.
- copy_tree: regular files and folders only (links and special files skipped), bounded.
"""

import contextlib
import datetime
import fcntl
import os
import re
import socket
import stat
import sys
import tempfile
import time

from tunedmpi.errors import InputError, OutputError

TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp\Z")


def _stage(path, write):
    """A temporary file beside ``path`` filled by write(binary file), fsynced: its name."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else 0o644
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _text(text):
    """A writer of ``text`` (str, as UTF-8) or ``bytes`` (as they are: a kept copy byte for byte)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    return lambda fh: fh.write(data)


def write_atomic(path, text):
    """Write ``text`` via a temporary file in the same directory, fsync, then os.replace."""
    write_atomic_with(path, _text(text))


def write_atomic_with(path, write):
    """As write_atomic, the content written by write(binary file object), e.g. a plot's savefig."""
    path = str(path)
    tmp = None
    try:
        tmp = _stage(path, write)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            _unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(path, exc) from exc
        raise


@contextlib.contextmanager
def replaced_by(path, mode=0o644):
    """The name of a temporary file beside ``path`` for another program to write (a compiler's
    -o): when the block ends normally it is given ``mode`` and renamed to ``path``, else removed."""
    tmp = _stage(str(path), lambda fh: None)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        _unlink(tmp)


def write_all_or_none(files):
    """Write {path: text or bytes} so that either every file is replaced or none is: each is first written
    whole to its temporary file (where a full disk or a permission shows), and only when all are
    there are they renamed into place, in the given order. A failure removes every temporary file
    and raises OutputError; the old files stay. (A process killed during the renames, which need
    no space, leaves some files new and some old, each whole.)"""
    staged, path = [], None
    try:
        for path, text in files.items():
            staged.append((_stage(str(path), _text(text)), str(path)))
        for i, (tmp, path) in enumerate(staged):
            os.replace(tmp, path)
            staged[i] = (None, path)
    except BaseException as exc:
        for tmp, _ in staged:
            if tmp:
                _unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(path, exc) from exc  # the file being written or renamed
        raise


def stray_temps(root):
    """Temporary files of atomic writes under ``root`` (a killed process left them), sorted."""
    found = []
    for folder, _, names in os.walk(str(root)):
        found += [os.path.join(folder, n) for n in names if TEMP_NAME.match(n)]
    return sorted(found)


# What a lock file holds (HOLDER): a file that is not empty and not such a line was not made as a
# lock, and is never truncated.
HOLDER = re.compile(rb"\Apid \d+ on [^\n]* since [^\n]*\n?\Z")


def _refuse_lock(path, problem):
    return InputError(
        path,
        None,
        "lock",
        problem,
        "remove it (it is not a lock file this tool made), then rerun",
    )


def _open_lock(path):
    """The descriptor of the lock file ``path``: its folder (made when missing) opened without
    following a link, the file created there, or opened without following a link and only when it
    is a regular file with one name that is empty or holds a HOLDER line, so that a link planted in
    a shared store never makes the lock truncate another file."""
    folder, name = os.path.split(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise OutputError(path, exc) from exc
    try:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            return os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except PermissionError:  # another user's lock (a machine-wide one): flock needs no write
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd
            )
        except OSError as exc:
            raise _refuse_lock(path, "cannot be opened as a lock file (%s)" % exc.strerror) from exc
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise _refuse_lock(path, "is not a regular file with one name")
        head = os.pread(fd, 4097, 0)
        if head and not HOLDER.match(head):
            os.close(fd)
            raise _refuse_lock(path, "holds something other than a lock holder's line")
        return fd
    except OSError as exc:
        raise OutputError(path, exc) from exc
    finally:
        os.close(dfd)


@contextlib.contextmanager
def locked(path, what, wait=0.0):
    """Hold an exclusive fcntl.flock on the file ``path`` (created if missing, never removed: removing
    a lock file races with the next holder) while the block runs, as Spack and EasyBuild lock their
    stores. The file says who holds it. When another process holds it, retry for ``wait`` seconds,
    then raise InputError naming the holder. The kernel drops the lock when the holder ends, even
    by SIGKILL, so a stale lock file never blocks anyone. A link, a FIFO, a folder or a file that
    is not a lock at that path is refused (_open_lock)."""
    path = str(path)
    fd = _open_lock(path)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
                    raise InputError(
                        path,
                        None,
                        "lock",
                        "%s is in use by %s" % (what, holder or "another process"),
                        "wait for that process to end (or stop it), then rerun"
                        + (" (waited %gs)" % wait if wait else ""),
                    )
                time.sleep(0.1)
        # another user's lock: not written
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            yield path
            return
        os.ftruncate(fd, 0)
        line = "pid %d on %s since %s (%s)" % (
            os.getpid(),
            socket.gethostname(),
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            " ".join(["tunedmpi"] + sys.argv[1:3]),
        )
        # printable ASCII only, so that the line stays one HOLDER line whatever the arguments were
        os.pwrite(fd, re.sub(r"[^ -~]", "?", line).encode() + b"\n", 0)
        yield path
    finally:
        os.close(fd)


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


@contextlib.contextmanager
def _opened(path):
    """A read-only descriptor of ``path`` that is a regular file, closed after the block.
    O_NONBLOCK: opening a FIFO for reading blocks until a writer comes, so it is opened at once
    and then refused by fstat."""
    fd = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise FileRefused(path, "is %s, not a regular file" % kind)
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


def read_bytes(path, limit=MAX_BYTES):
    """The content of the regular file ``path``, refused when it is bigger than ``limit`` bytes
    (checked by reading, not only by its size: /proc files and growing files lie)."""
    with _opened(path) as fd:
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


def read_head(path, size):
    """The first ``size`` bytes (or fewer) of the regular file ``path``: enough to recognise it."""
    with _opened(path) as fd:
        return os.read(fd, size)


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
    with _opened(path) as fd:
        while True:
            chunk = os.read(fd, size)
            if not chunk:
                return
            yield chunk


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
