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

The packages come through apt, from the Debian archive the system's own apt sources name, with
a private sources list, state and cache under DIR/apt: `apt-get update` reads trixie's and
trixie-backports' package lists there and `apt-get download` fetches the .debs (about 80 MB),
checked against Debian's archive keys as every apt download is. The system's package state is
neither read nor changed, so this runs as any user. third_party/vulkan-stack.txt lists what it
unpacks; packages named after DIR are unpacked too (the GPU check's llama.cpp build takes
trixie's Vulkan headers, libvulkan-dev, so: tools/gpu/build_llama.sh).

Usage: fetch.py DIR [PACKAGE...]
"""
import glob
import os
import re
import shutil
import subprocess
import sys

MAIN, BACKPORTS = "trixie", "trixie-backports"
# The packages wanted and those taken from BACKPORTS: third_party/vulkan-stack.txt.
LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../third_party/vulkan-stack.txt")
# Packages whose files the stack does not need (maintainer tools, configuration).
SKIP = {"debconf", "debconf-2.0", "libc-bin", "usrmerge", "dpkg", "perl-base", "adduser", "libc-gconv-modules-extra"}
ARCH = "amd64"


def read_list():
    wanted, prefer_backports = [], set()
    for line in open(LIST):
        words = line.split("#")[0].split()
        if words:
            wanted.append(words[0])
            if words[1:] == [BACKPORTS]:
                prefer_backports.add(words[0])
            elif words[1:]:
                sys.exit(f"fetch.py: {LIST}: only {BACKPORTS} may follow a package name: {line.strip()}")
    return wanted + sys.argv[2:], prefer_backports


def source_entries():
    """(types, uris, suites, signed_by) of every entry in the system's apt sources, in order."""
    entries = []
    one_line = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for path in one_line:
        if not os.path.isfile(path):
            continue
        for line in open(path, encoding="utf-8", errors="replace"):
            line = re.sub(r"\[[^]]*\]", " ", line.split("#")[0])  # drop comments and [options]
            words = line.split()
            if len(words) >= 3:
                entries.append(([words[0]], [words[1]], [words[2]], ""))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in open(path, encoding="utf-8", errors="replace").read().split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[0].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if fields.get("enabled", "yes").lower() == "no":
                continue
            entries.append((fields.get("types", "").split(), fields.get("uris", "").split(),
                            fields.get("suites", "").split(), fields.get("signed-by", "")))
    return entries


def debian_archive():
    """The URI of the Debian archive the system installs from (its entry for the release's own
    suite, not security or updates), and that entry's Signed-By."""
    codename = ""
    if os.path.isfile("/etc/os-release"):
        for line in open("/etc/os-release"):
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    entries = [(uris[0], suites, signed_by) for types, uris, suites, signed_by in source_entries()
               if "deb" in types and uris]
    for uri, suites, signed_by in entries:
        if codename and codename in suites:
            return uri, signed_by
    # A system that names its suite "stable" or the like: its first entry that is not security
    # fixes, updates or backports.
    for uri, suites, signed_by in entries:
        if any(not re.search(r"security|updates|backports", suite) for suite in suites):
            return uri, signed_by
    sys.exit("fetch.py: no Debian archive in /etc/apt/sources.list or /etc/apt/sources.list.d "
             f"(an entry of type deb for suite {codename or 'the release'})")


def apt_options(apt):
    """apt-get options that keep every file apt reads or writes under the folder apt."""
    return ["-o", f"Dir::Etc::SourceList={apt}/sources.list",
            "-o", f"Dir::Etc::SourceParts={apt}/sources.list.d",
            "-o", f"Dir::Etc::Preferences={apt}/preferences",
            "-o", f"Dir::Etc::PreferencesParts={apt}/preferences.d",
            "-o", f"Dir::State={apt}/state",
            "-o", f"Dir::State::status={apt}/state/status",
            "-o", f"Dir::Cache={apt}/cache",
            "-o", f"APT::Architecture={ARCH}", "-o", f"APT::Architectures={ARCH}",
            "-o", "Acquire::Languages=none", "-o", "Debug::NoLocking=1", "-q"] + (
            # Root's downloads would run as the _apt user, which may not write the folder.
            ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else [])


def prepare_apt(apt):
    uri, signed_by = debian_archive()
    for sub in ("sources.list.d", "preferences.d", "state/lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(apt, sub), exist_ok=True)
    open(os.path.join(apt, "state/status"), "w").close()  # nothing installed: every dependency counts
    options = f"[arch={ARCH} signed-by={signed_by}]" if signed_by else f"[arch={ARCH}]"
    with open(os.path.join(apt, "sources.list"), "w") as out:
        for suite in (MAIN, BACKPORTS):
            out.write(f"deb {options} {uri} {suite} main\n")
    return uri


def read_index(apt, suite):
    """The package stanzas of one suite from the private lists apt-get update wrote."""
    lists = [path for path in glob.glob(os.path.join(apt, "state/lists/*_Packages*"))
             if f"_dists_{suite}_main_binary-{ARCH}_Packages" in os.path.basename(path)]
    if not lists:
        sys.exit(f"fetch.py: apt-get update left no package list for {suite}")
    # apt may keep the lists compressed (Acquire::GzipIndexes); its helper reads any of its formats.
    text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", lists[0]], check=True,
                          capture_output=True).stdout.decode("utf-8", "replace")
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
    """(package, version, filename) of the listed packages and everything they depend on (first
    alternative of each), from trixie except those the list takes from trixie-backports."""
    wanted, prefer_backports = read_list()
    chosen, pending = {}, list(wanted)
    while pending:
        name = pending.pop()
        if name in chosen or name in SKIP:
            continue
        packages, provides = main
        if name in prefer_backports and name in backports[0]:
            packages, provides = backports
        fields = packages.get(name) or packages.get(provides.get(name, ""))
        if not fields:
            sys.exit(f"fetch.py: {name} is not in Debian {MAIN}")
        chosen[name] = (fields["Package"], fields["Version"], os.path.basename(fields["Filename"]))
        for key in ("Pre-Depends", "Depends"):
            for alternatives in fields.get(key, "").split(","):
                dep = alternatives.split("|")[0].strip().split(" ")[0].split(":")[0]
                if dep:
                    pending.append(dep)
    return sorted(set(chosen.values()))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    unpacked = os.path.join(root, "root")
    debs = os.path.join(root, "debs")
    apt = os.path.join(root, "apt")
    os.makedirs(debs, exist_ok=True)
    uri = prepare_apt(apt)
    options = apt_options(apt)
    subprocess.run(["apt-get", *options, "update"], check=True, stdout=subprocess.DEVNULL)
    wanted = closure(read_index(apt, MAIN), read_index(apt, BACKPORTS))
    missing = [f"{name}={version}" for name, version, filename in wanted
               if not os.path.exists(os.path.join(debs, filename))]
    if missing:
        subprocess.run(["apt-get", *options, "download", *missing], check=True, cwd=debs,
                       stdout=subprocess.DEVNULL)
    if os.path.isdir(unpacked):
        shutil.rmtree(unpacked)
    for name, version, filename in wanted:
        deb = os.path.join(debs, filename)
        if not os.path.exists(deb):
            # apt-get download names a file by its version with ':' escaped as %3a.
            found = glob.glob(os.path.join(debs, f"{name}_*_*.deb"))
            found = [path for path in found if version.replace(":", "%3a") in path]
            if not found:
                sys.exit(f"fetch.py: apt-get download left no .deb for {name} {version}")
            deb = found[0]
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
    with open(os.path.join(root, "packages.txt"), "w") as out:
        out.writelines(f"{name} {version}\n" for name, version, _ in wanted)
    version = subprocess.run([glslc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    print(f"fetch.py: {len(wanted)} packages of Debian {MAIN} from {uri} through apt unpacked in {root} ({version})")


if __name__ == "__main__":
    main()
