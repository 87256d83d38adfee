#!/usr/bin/env python3
"""Lists the eaglevk command lines that README.md and docs/*.md show in code blocks, so that a
test can run each one as written (tests/tools/check_doc_commands.sh). A line continued with a
backslash is joined. Synopsis lines (with [optional] parts, or UPPERCASE names that stand for the
user's own values) and lines that name files outside the repository (/tmp, a user's model) are
usage, not commands: they are skipped, and so are lines marked `# not run:`."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
docs = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
for doc in docs:
    in_block = False
    pending = ""
    for raw in doc.read_text().splitlines():
        if raw.startswith("```"):
            in_block = not in_block
            pending = ""
            continue
        if not in_block:
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if re.search(r"\S {3,}\S", line.split("  #")[0]):
            continue  # a synopsis table: command, then its description
        command = line.split("  #")[0].strip()
        if not re.match(r"^(\./build/)?eaglevk( |$)", command):
            continue
        if "[" in command or "# not run" in line or re.search(r"(^| )(/tmp|/data|/models|~)", command):
            continue
        if re.search(r"\b[A-Z]{2,}\b", command.replace("EAGLEVK", "")):
            continue  # an UPPERCASE name for the user's own value, such as PATH or FILE
        print(f"{doc.relative_to(root)}\t{command}")
