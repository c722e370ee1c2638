#!/usr/bin/env python3
"""tests/data/make_inputs.py - writes the small committed inputs of
tests/test_data.c (IDX, gzip, CSV, text) with Python's standard library only,
independently of dl/data.h, so the tests read files that dl.h did not write.
The images come from tests/data/make_images.c (stb_image_write).

    python3 tests/data/make_inputs.py      # from the repository root

The output is deterministic (gzip mtime 0), so re-running it changes nothing.
"""
import gzip
import io
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def idx(type_byte, dims, fmt, values):
    head = bytes([0, 0, type_byte, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    return head + b"".join(struct.pack(">" + fmt, v) for v in values)


def gz(data):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as f:
        f.write(data)
    return buf.getvalue()


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    # u8 images [5, 3, 4]: pixel (n, y, x) = (37 n + 11 y + 3 x) mod 256
    imgs = [(37 * n + 11 * y + 3 * x) % 256 for n in range(5) for y in range(3) for x in range(4)]
    write("images_u8.idx", idx(0x08, [5, 3, 4], "B", imgs))
    write("images_u8.idx.gz", gz(idx(0x08, [5, 3, 4], "B", imgs)))
    labels = [3, 0, 2, 2, 1]
    write("labels_u8.idx", idx(0x08, [5], "B", labels))
    write("labels_u8.idx.gz", gz(idx(0x08, [5], "B", labels)))
    # other element types
    write("i8.idx", idx(0x09, [4], "b", [-128, -1, 0, 127]))
    write("i16.idx", idx(0x0B, [2, 2], "h", [-32768, -2, 513, 32767]))
    write("i32.idx", idx(0x0C, [3], "i", [-2147483648, 16909060, 2147483647]))
    write("f32.idx", idx(0x0D, [2, 3], "f", [0.5, -1.25, 3.0e38, 1.0e-40, -0.0, 7.0]))
    write("f64.idx", idx(0x0E, [1, 2, 2], "d", [3.141592653589793, -2.5e-300, 1.0e300, -0.0]))
    # gzip made of two members (as `cat a.gz b.gz` gives): one IDX file
    whole = idx(0x08, [5], "B", labels)
    write("labels_2members.idx.gz", gz(whole[:7]) + gz(whole[7:]))

    # CSV
    write("iris_small.csv", (
        "sepal_length,sepal_width,petal_length,petal_width,species\n"
        "5.1,3.5,1.4,0.2,0\n"
        "4.9,3.0,1.4,0.2,0\n"
        "\n"
        "7.0,3.2,4.7,1.4,1\n"
        "6.4,3.2,4.5,1.5,1\n"
        "6.3,3.3,6.0,2.5,2\n"
        "5.8,2.7,5.1,1.9,2\n").encode())
    write("regression_crlf.csv", (
        "\ufeff\"x 1\", \"x,2\" ,\"target \"\"y\"\"\"\r\n"
        "1,2,0.5\r\n"
        " -3.5 , \"4e2\" , -1.25e-1 \r\n"
        "+0.0,.5,7\r\n").encode("utf-8"))
    write("ragged.csv", b"a,b,label\n1,2,0\n3,4\n5,6,1\n")
    write("missing.csv", b"a,b,label\n1,2,0\n3,,1\n")
    write("missing_na.csv", b"a,b,label\n1,NA,0\n")
    write("badnum.csv", b"a,b,label\n1,2,0\n3,4,1\n5,six,1\n")
    write("badlabel.csv", b"a,b,label\n1,2,0.5\n")
    write("noheader.csv", b"1,2,0\n3,4,1\n")
    write("empty.csv", b"")
    write("header_only.csv", b"a,b,label\n")
    write("unterminated.csv", b"a,b,label\n1,\"2,0\n")
    write("iris_small.csv.gz", gz(open(os.path.join(HERE, "iris_small.csv"), "rb").read()))

    # text
    write("text.txt", b"hello, world\nthe quick brown fox\n")

    # hostile gzip: a corrupt deflate stream and a truncated one
    good = gz(idx(0x08, [5, 3, 4], "B", imgs))
    bad = bytearray(good)
    for i in range(12, 24):
        bad[i] ^= 0x5A
    write("corrupt.idx.gz", bytes(bad))
    write("truncated.idx.gz", good[: len(good) // 2])
    write("trailing_garbage.idx.gz", good + b"\x00\x01garbage")

    # a decode bomb: a 74-byte PNG whose header declares 32000 x 32000 grey
    # (1 GB decoded, 2 GB while stb_image decodes it; stb itself refuses
    # above 2^30 bytes, so RGB would not be one); its data is one compressed
    # row. dl_image_load must refuse it from the header, before decoding.
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 32000, 32000, 8, 0, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1024, 9)) + chunk(b"IEND", b"")
    os.makedirs(os.path.join(HERE, "images_bomb", "big"), exist_ok=True)
    write(os.path.join("images_bomb", "big", "huge.png"), png)


if __name__ == "__main__":
    main()
