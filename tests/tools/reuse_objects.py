#!/usr/bin/env python3
"""Lets a second build tree take the objects of a first one instead of compiling them again, so
that a test can build a scratch copy of the sources in seconds (tests/tools/check_readme_commands.sh).

  reuse_objects.py index ORIG_SRC ORIG_BUILD NEW_SRC INDEX   record what ORIG_BUILD's ninja
                                                            built: each output's command and the
                                                            files it read
  reuse_objects.py compile COMPILER ARGS...                 a compiler launcher
                                                            (CMAKE_CXX_COMPILER_LAUNCHER)
  reuse_objects.py glslc GLSLC ARGS...                      in place of the glslc GLSLC

The second and third read EAGLEVK_REUSE_INDEX=INDEX. An output is copied from ORIG_BUILD only when
its command, with ORIG_SRC and ORIG_BUILD read as NEW_SRC and the current build folder, is the one
ORIG_BUILD ran, and every file it read (the source, the headers ninja recorded, generated files
too; for a shader, every header (.glsl, .h) in its folder, as glslc reports no dependencies
here) is byte for byte the
same in both trees. Anything else is compiled, so a scratch build never holds an object its own
sources would not give. One exception is checked too: an object whose command defines a macro
naming the tree (EAGLEVK_SOURCE_DIR) and whose source uses it is compiled, or the copy would point
into ORIG_SRC. Without EAGLEVK_REUSE_INDEX every command simply runs.
"""
import filecmp
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys


def key(output):
    return hashlib.sha1(output.encode()).hexdigest()


def make_index(orig_src, orig_build, new_src, index):
    os.makedirs(index, exist_ok=True)
    compdb = json.loads(subprocess.run(["ninja", "-C", orig_build, "-t", "compdb"], check=True,
                                       capture_output=True, text=True).stdout)
    deps, current = {}, None
    listing = subprocess.run(["ninja", "-C", orig_build, "-t", "deps"], check=True,
                             capture_output=True, text=True).stdout
    for line in listing.splitlines():
        if line and not line[0].isspace():
            current = line.split(":")[0] if "(VALID)" in line else None
            if current:
                deps[current] = []
        elif current and line.strip():
            deps[current].append(line.strip())
    with open(os.path.join(index, "trees.json"), "w") as out:
        json.dump({"orig_src": orig_src, "orig_build": orig_build, "new_src": new_src}, out)
    count = 0
    for entry in compdb:
        output = entry.get("output", "")
        if not output:
            continue
        record = {"command": entry["command"], "file": entry["file"], "deps": deps.get(output)}
        with open(os.path.join(index, key(output) + ".json"), "w") as out:
            json.dump(record, out)
        count += 1
    print(f"reuse_objects.py: {count} outputs of {orig_build} indexed")


class Trees:
    def __init__(self, index):
        self.index = index
        trees = json.load(open(os.path.join(index, "trees.json")))
        self.orig_src, self.orig_build = trees["orig_src"], trees["orig_build"]
        self.new_src, self.new_build = trees["new_src"], os.getcwd()

    def to_new(self, text):
        """ORIG_BUILD and ORIG_SRC in text read as the new build folder and NEW_SRC."""
        # One pass: the new trees may lie inside the old ones (a scratch copy under BUILD).
        pattern = "(" + re.escape(self.orig_build) + "|" + re.escape(self.orig_src) + r")(?=/|$|\W)"
        return re.sub(pattern, lambda m: self.new_build if m.group(1) == self.orig_build else self.new_src, text)

    def record(self, output):
        path = os.path.join(self.index, key(output) + ".json")
        return json.load(open(path)) if os.path.exists(path) else None

    def same_file(self, orig_path):
        if not os.path.isabs(orig_path):
            orig_path = os.path.join(self.orig_build, orig_path)
        new_path = self.to_new(orig_path)
        if new_path == orig_path:
            return True  # a system header: the same file for both trees
        return os.path.isfile(new_path) and filecmp.cmp(orig_path, new_path, shallow=False)


def option(args, name):
    return args[args.index(name) + 1] if name in args[:-1] else None


def reuse(trees, args, orig_args, output, inputs, depfile):
    """Copies ORIG_BUILD's output when args are its command's and inputs are unchanged."""
    if args != [trees.to_new(a) for a in orig_args] or not all(trees.same_file(p) for p in inputs):
        return False
    orig_output = os.path.join(trees.orig_build, output)
    new_output = os.path.join(trees.new_build, output)
    if not os.path.isfile(orig_output):
        return False
    os.makedirs(os.path.dirname(new_output) or ".", exist_ok=True)
    shutil.copyfile(orig_output, new_output)  # a new mtime: ninja compares it with the inputs'
    if depfile:
        deps = [trees.to_new(p if os.path.isabs(p) else os.path.join(trees.orig_build, p)) for p in inputs]
        with open(os.path.join(trees.new_build, depfile), "w") as out:
            out.write(output + ": " + " ".join(d.replace(" ", "\\ ") for d in deps) + "\n")
    return True


def names_the_tree(trees, args, source):
    """Whether a -DNAME=VALUE naming the tree is used by the source (EAGLEVK_SOURCE_DIR)."""
    text = None
    for arg in args:
        match = re.match(r"-D(\w+)=(.*)", arg)
        if match and (trees.new_src in match.group(2) or trees.new_build in match.group(2)):
            if text is None:
                text = open(source, errors="replace").read()
            if match.group(1) in text:
                return True
    return False


def compile_command(argv):
    index = os.environ.get("EAGLEVK_REUSE_INDEX")
    output = option(argv, "-o")
    if index and output:
        trees = Trees(index)
        record = trees.record(output)
        source = option(argv, "-c")
        if record and record["deps"] and source and not names_the_tree(trees, argv, source):
            orig_args = shlex.split(record["command"])
            if argv[0] in orig_args:  # past a launcher of the original build (this one, say)
                orig_args = orig_args[orig_args.index(argv[0]):]
            if reuse(trees, argv, orig_args, output, record["deps"], option(argv, "-MF")):
                return 0
    os.execvp(argv[0], argv)


def glslc(real, args):
    index = os.environ.get("EAGLEVK_REUSE_INDEX")
    spv = option(args, "-o")
    if index and spv and args and os.path.isfile(args[-1]):
        trees = Trees(index)
        output = os.path.relpath(spv, trees.new_build)
        record = trees.record(output)
        if record:
            # CMake runs a custom command as `cd BUILD && GLSLC ARGS`.
            orig_args = shlex.split(record["command"].split("&&", 1)[-1])[1:]
            folder = os.path.dirname(record["file"])
            inputs = [record["file"]] + [os.path.join(folder, name) for name in sorted(os.listdir(folder))
                                         if name.endswith((".glsl", ".h"))]
            if reuse(trees, list(args), orig_args, output, inputs, None):
                return 0
    os.execv(real, [real] + list(args))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "index" and len(sys.argv) == 6:
        make_index(*[os.path.abspath(a) for a in sys.argv[2:]])
    elif len(sys.argv) >= 3 and sys.argv[1] == "compile":
        sys.exit(compile_command(sys.argv[2:]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "glslc":
        sys.exit(glslc(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
