"""A .zst file's decompressed bytes: its frames one after another (the `zstandard` package),
checked to end where the file does (zstandard's stream readers stop silently at a truncated
frame, or after the first).

The corpus job reads a small .zst input in the job's process (ZstdFrames) and a large one
through a child process running this file as a script (`python -P corpus/inputs/zstd_frames.py FILE`: the
decompressed bytes on stdout; an error, one line on stderr and exit status 1; Python 3.10, which
has no -P, reads it in the job's process too). In the job's process zstandard
releases the GIL for each small piece of output and waits to take it back after each, behind
the job's other threads: a GIL convoy. The script is run by its path so that the child does not
import the package (its __init__ imports jax); hence only the standard library and zstandard
here, no relative imports."""

import io
import sys
from typing import BinaryIO, Iterator

# Compressed bytes given to the decompressor at a time: its output (a few hundred KB) is still in
# the cache when it is written out, where megabytes of it were not.
READ_BYTES = 64 << 10


def decompressed_frames(file: BinaryIO) -> Iterator[bytes]:
    """The decompressed bytes of the .zst file `file`, in pieces of what each READ_BYTES of it
    holds; OSError where the data is invalid, EOFError where the file ends inside a frame."""
    import zstandard  # (here: the package imports this module without needing zstandard)

    frame = None  # the current frame's decompressor
    while data := file.read(READ_BYTES):
        while data:
            if frame is None:
                frame = zstandard.ZstdDecompressor().decompressobj()
            try:
                piece = frame.decompress(data)
            except zstandard.ZstdError as e:
                raise OSError(f"invalid .zst data: {e}") from None
            if piece:
                yield piece
            if frame.eof:  # (the next frame starts in what this one left)
                data, frame = frame.unused_data, None
            else:
                data = b""
    if frame is not None and not frame.eof:
        raise EOFError("the .zst file ended inside a frame")


class ZstdFrames(io.RawIOBase):
    """A .zst file read as its decompressed bytes (decompressed_frames)."""

    def __init__(self, path):
        import zstandard  # noqa: F401 (missing: an ImportError here, when opened, not at the first read)

        self._file = open(path, "rb")
        self._pieces = decompressed_frames(self._file)
        self._output = memoryview(b"")  # what is left of the current piece
        self._failure = None  # an error met after some bytes: raised by the next read, and the later ones

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._failure is not None:
            raise self._failure
        view, n = memoryview(buf).cast("B"), 0
        while n < len(view):
            if not self._output:
                try:
                    self._output = memoryview(next(self._pieces, b""))
                except (OSError, EOFError) as e:
                    self._failure = e
                    if n:  # (the bytes before the error first: its reader names the line after them)
                        break
                    raise
                if not self._output:
                    break
            k = min(len(view) - n, len(self._output))
            view[n : n + k] = self._output[:k]
            self._output = self._output[k:]
            n += k
        return n

    def close(self) -> None:
        self._pieces.close()
        self._file.close()
        super().close()


def main(argv: list) -> int:
    """Writes the decompressed bytes of the file argv[1] to stdout, a piece per write."""
    if len(argv) != 2:
        print(f"usage: python -P {argv[0]} FILE.zst", file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as f:
            for piece in decompressed_frames(f):
                sys.stdout.buffer.write(piece)
        sys.stdout.buffer.flush()
    except (OSError, EOFError) as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
