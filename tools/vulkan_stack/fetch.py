#!/usr/bin/env python3
"""Unpack a newer Vulkan stack from Debian 13 into a folder, beside the system's Debian 12 one.

Debian 12's glslc (shaderc 2023.2) does not know GL_KHR_cooperative_matrix and its Mesa 22.3
lavapipe lacks VK_KHR_cooperative_matrix, so the prefill GEMM's coopmat kernel could neither be
built nor run here. Debian 13 ("trixie") has a glslc that knows the extension, and
trixie-backports a Mesa whose lavapipe runs it (8 x 8 x 8 f16 matrices with f32 sums), with a
Vulkan loader and validation layer that know it. They need trixie's C and C++ libraries, so
nothing is installed: the packages are unpacked into DIR, and

  DIR/run PROGRAM ARGS...   runs a program with trixie's dynamic loader and libraries first
                            (the system's after them, for what trixie's set does not have)
  DIR/glslc                 trixie's glslc, through DIR/run
  DIR/lvp_icd.json          the unpacked lavapipe, for VK_ICD_FILENAMES
  DIR/layers                the unpacked validation layer, for VK_LAYER_PATH

Usage: fetch.py DIR   (downloads about 80 MB from deb.debian.org, Debian's own archive)
"""
import lzma
import os
import shutil
import subprocess
import sys
import urllib.request

MIRROR = "http://deb.debian.org/debian"
# Suites in order of preference for the packages named in PREFER_BACKPORTS.
MAIN, BACKPORTS = "trixie", "trixie-backports"
WANTED = ["glslc", "mesa-vulkan-drivers", "libvulkan1", "vulkan-validationlayers"]
PREFER_BACKPORTS = {"mesa-vulkan-drivers"}
# Packages whose files the stack does not need (maintainer tools, configuration).
SKIP = {"debconf", "debconf-2.0", "libc-bin", "usrmerge", "dpkg", "perl-base", "adduser", "libc-gconv-modules-extra"}


def read_index(suite):
    url = f"{MIRROR}/dists/{suite}/main/binary-amd64/Packages.xz"
    with urllib.request.urlopen(url, timeout=120) as response:
        text = lzma.decompress(response.read()).decode("utf-8", "replace")
    packages, provides = {}, {}
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name = fields.get("Package")
        if not name or name in packages:
            continue
        packages[name] = fields
        for entry in fields.get("Provides", "").split(","):
            virtual = entry.strip().split(" ")[0]
            if virtual:
                provides.setdefault(virtual, name)
    return packages, provides


def closure(main, backports):
    """The .deb paths of WANTED and everything they depend on (first alternative of each)."""
    chosen, pending = {}, list(WANTED)
    while pending:
        name = pending.pop()
        if name in chosen or name in SKIP:
            continue
        packages, provides = main
        if name in PREFER_BACKPORTS and name in backports[0]:
            packages, provides = backports
        fields = packages.get(name) or packages.get(provides.get(name, ""))
        if not fields:
            sys.exit(f"fetch.py: {name} is not in Debian {MAIN}")
        chosen[name] = fields["Filename"]
        for key in ("Pre-Depends", "Depends"):
            for alternatives in fields.get(key, "").split(","):
                dep = alternatives.split("|")[0].strip().split(" ")[0].split(":")[0]
                if dep:
                    pending.append(dep)
    return sorted(chosen.values())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    unpacked = os.path.join(root, "root")
    debs = os.path.join(root, "debs")
    os.makedirs(debs, exist_ok=True)
    files = closure(read_index(MAIN), read_index(BACKPORTS))
    if os.path.isdir(unpacked):
        shutil.rmtree(unpacked)
    for path in files:
        deb = os.path.join(debs, os.path.basename(path))
        if not os.path.exists(deb):
            with urllib.request.urlopen(f"{MIRROR}/{path}", timeout=600) as response, open(deb + ".part", "wb") as out:
                shutil.copyfileobj(response, out)
            os.replace(deb + ".part", deb)
        subprocess.run(["dpkg-deb", "-x", deb, unpacked], check=True)

    lib = os.path.join(unpacked, "usr/lib/x86_64-linux-gnu")
    run = os.path.join(root, "run")
    with open(run, "w") as out:
        out.write("#!/bin/sh\n# Runs a program with Debian 13's dynamic loader and libraries first (fetch.py).\n"
                  f'exec "{lib}/ld-linux-x86-64.so.2" --library-path "{lib}:/usr/lib/x86_64-linux-gnu" "$@"\n')
    glslc = os.path.join(root, "glslc")
    with open(glslc, "w") as out:
        out.write(f'#!/bin/sh\nexec "{run}" "{unpacked}/usr/bin/glslc" "$@"\n')
    for script in (run, glslc):
        os.chmod(script, 0o755)
    with open(os.path.join(root, "lvp_icd.json"), "w") as out:
        out.write('{"file_format_version": "1.0.0", "ICD": {"library_path": "%s/libvulkan_lvp.so", '
                  '"api_version": "1.3.0"}}\n' % lib)
    layers = os.path.join(root, "layers")
    if os.path.islink(layers) or os.path.exists(layers):
        os.remove(layers)
    os.symlink(os.path.join(unpacked, "usr/share/vulkan/explicit_layer.d"), layers)
    version = subprocess.run([glslc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    print(f"fetch.py: {len(files)} packages of Debian {MAIN} unpacked in {root} ({version})")


if __name__ == "__main__":
    main()
