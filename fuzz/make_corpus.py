#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/TARGET/), from the kinds of input the test
suite builds (tests/engine/data_test.cpp's files, tests/golden/report.json, the step lines of
tests/cmd/fake_trainer.py and docs/cmd.md). The first byte of an idx, csv or protocol seed is the
target's mode byte (fuzz/targets.cpp). Run once; the corpora are committed.

  python3 fuzz/make_corpus.py
"""
import gzip
import os
import shutil
import struct

root = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(root, "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(corpus, target), exist_ok=True)
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def idx(dims, payload):
    return struct.pack(">I", 0x800 + len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)


images = idx([3, 4, 4], range(48))
labels = idx([3], [0, 9, 4])
put("idx", "labels", b"\x00" + labels)
put("idx", "images", b"\x01" + images)
put("idx", "images.gz", b"\x01" + gzip.compress(images))
put("idx", "pair", b"\x02" + struct.pack(">H", len(images)) + images + labels)
put("idx", "truncated", b"\x01" + images[:30])

record = lambda label: bytes([label]) + bytes(i % 256 for i in range(3 * 32 * 32))
put("cifar10", "two_records", record(3) + record(9))
put("cifar10", "half_record", record(1)[:1500])


def npy(descr, shape, payload, version=1, fortran=False):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    length = 2 if version == 1 else 4
    pad = (64 - (10 + length - 2 + len(header) + 1) % 64) % 64
    header += " " * pad + "\n"
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<H" if version == 1 else "<I", len(header)) + \
        header.encode() + payload


put("npy", "f4_3x2", npy("<f4", [3, 2], struct.pack("<6f", 1, 2, 3, 4, 5, 6)))
put("npy", "i8_labels", npy("<i8", [3], struct.pack("<3q", 0, 2, 1)))
put("npy", "u1_images", npy("|u1", [2, 1, 2, 2], bytes(range(8))))
put("npy", "f8_v2", npy("<f8", [2, 2], struct.pack("<4d", 0.5, 1, 1.5, 2), version=2))
put("npy", "b1", npy("|b1", [4], bytes([0, 1, 1, 0])))
put("npy", "fortran", npy("<f4", [2, 2], struct.pack("<4f", 1, 2, 3, 4), fortran=True))
put("npy", "nan", npy("<f4", [2, 1], struct.pack("<2f", float("nan"), 1)))

put("csv", "named_label", b"\x01" + b"sepal,label,petal\n1.5,0,2\n2.5,1,3\n\n3.5,2,-4e-1\n")
put("csv", "last_column", b"\x00" + b"a,b,label\n1,2,0\n3,4,1\n")
put("csv", "values", b"\x04" + b"1,2,0.5\n3,4,1\n")
put("csv", "quoted", b"\x01" + b"\"width, cm\",\"the \"\"label\"\"\",\"note\r\nline\"\r\n1.5,0,2\r\n2.5,1,3\r\n")
put("csv", "bom_crlf", b"\x02" + b"\xef\xbb\xbfx,y\r\n0,1\r\n1,0\r\n")

with open(os.path.join(root, "..", "tests", "golden", "report.json"), "rb") as f:
    put("report", "golden", f.read())
put("report", "minimal", b'{"schema_version": "1"}')

put("protocol", "steps", b"\x02" + b"training at batch 32\n" + b"".join(
    b"batchwise: step samples=32 loss=%.4f\n" % (1.0 / s) for s in range(1, 6)))
put("protocol", "reported", b"\x03" + b"batchwise: step\nbatchwise: step\nbatchwise: step\nbatchwise: step\n"
    b"batchwise: samples_per_s=1234.5\nbatchwise: peak_bytes=1048576\n")
put("protocol", "garbage", b"\x02" + b"batchwise: step samples=abc loss=nan? =5 step=\nbatchwise:\n"
    b"batchwise: samples_per_s=fast peak_bytes=-3 unknown=1\n")
put("protocol", "quiet_long", b"\xe2" + b"training without step lines\n")
put("protocol", "callback", b"\x02" + b"batchwise: reporter=lightning\n" + b"".join(
    b"batchwise: step samples=%d batch=%d loss=%.4f\n" % (40 if s % 2 else 32, 32 if s % 2 else 8, 1.0 / s)
    for s in range(1, 6)))
put("protocol", "trained_nothing", b"\xe2" + b"batchwise: reporter=keras\nevaluating\n")
put("protocol", "oom", b"\x05" + b"batchwise: step samples=32\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
