"""Find kernel headers for bcc, and say which ones were found.

The probes use tracepoint arguments and helpers only, so any reasonably recent kernel headers
compile them; the headers only have to be *some* kernel's. In order:

1. the running kernel's own: /lib/modules/$(uname -r)/build (with .../source beside it when the
   distribution splits generated and plain headers, as Debian does): bcc finds these itself;
2. a directory the operator configured (--ebpf.kernel-headers): a full header tree, a Debian/Ubuntu
   "build" directory whose Makefile includes its source tree, or a /lib/modules/<release> dir;
3. a generic set installed under /usr/src (Debian's linux-headers-<version>-<flavour> plus its
   -common tree, as the linux-headers-amd64 or linux-headers-arm64 package or a container image
   provides).

Every tree but the running kernel's must be for this machine's architecture (arch/x86 on
x86_64, arch/arm64 on aarch64): a set for another one (an amd64 image's tree on an arm64 node, a
multi-arch /usr/src) is passed over, because bcc would compile with the wrong asm headers.

For 2 and 3 bcc is pointed at the tree through BCC_KERNEL_SOURCE; where the generated headers
live in a separate build tree, they are added with -I flags (bcc's own split-tree support only
works under /lib/modules/$(uname -r)).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.host.hostfile import read_text_bounded
from exporter.model.readings import SourceError

NO_HEADERS = "no kernel headers"

RUNNING = "running kernel"
CONFIGURED = "configured"
GENERIC = "generic"

_KCONFIG = Path("include/linux/kconfig.h")  # what bcc checks for a usable tree
_AUTOCONF = Path("include/generated/autoconf.h")
_UTSRELEASE = Path("include/generated/utsrelease.h")
_MAKEFILE_INCLUDE = re.compile(r"^include\s+(\S+)/Makefile\s*$", re.MULTILINE)
_VERSION_PART = re.compile(r"\d+|[^\d]+")
# the two files read here (a build dir's Makefile: ~2 KiB on Debian, ~70 KiB in a full tree;
# utsrelease.h: one line) through the non-blocking reader, so a FIFO or a huge file in a
# header tree costs a bounded read at start-up, never a hang
_MAX_HEADER_FILE = 1 << 20

# uname -m -> the kernel's arch directory name (bcc's kbuild_helper mapping)
_KERNEL_ARCH = (
    ("x86_64", "x86"),
    ("i686", "x86"),
    ("i386", "x86"),
    ("aarch64", "arm64"),
    ("arm64", "arm64"),  # the BSDs' and Apple's name; before "arm", which it starts with
    ("arm", "arm"),
    ("ppc", "powerpc"),
    ("s390", "s390"),
    ("riscv", "riscv"),
    ("mips", "mips"),
    ("loongarch", "loongarch"),
)


def kernel_arch(machine: str) -> str:
    for prefix, arch in _KERNEL_ARCH:
        if machine.startswith(prefix):
            return arch
    return machine


@dataclass(frozen=True)
class KernelHeaders:
    """A header tree bcc can compile against, and where it came from."""

    origin: str  # RUNNING, CONFIGURED or GENERIC
    source: Path  # the tree holding include/linux/kconfig.h
    build: Path | None  # a separate tree with the generated headers (Debian's split packages)
    release: str  # the kernel release the headers were made for ("" if they do not say)
    running: str  # the running kernel's release
    native: bool  # bcc finds these by itself under /lib/modules/$(uname -r)
    arch: str

    @property
    def matches_running(self) -> bool:
        return self.release == self.running

    def environment(self) -> dict[str, str | None]:
        """Environment bcc must compile under (None: the variable must be unset)."""
        if self.native:
            return {"BCC_KERNEL_SOURCE": None}
        return {"BCC_KERNEL_SOURCE": str(self.source)}

    def cflags(self) -> list[str]:
        if self.native or self.build is None:
            return []
        b, arch = self.build, self.arch
        return [
            f"-I{b}/arch/{arch}/include/generated",
            f"-I{b}/arch/{arch}/include/generated/uapi",
            f"-I{b}/include",
            f"-I{b}/include/generated/uapi",
        ]

    def describe(self) -> str:
        trees = str(self.source) if self.build is None else f"{self.build} + {self.source}"
        version = self.release or "unknown version"
        text = f"{self.origin} headers {version} ({trees})"
        if not self.matches_running:
            text += f"; running kernel is {self.running}"
        return text


def find_kernel_headers(
    configured: Path | None = None,
    *,
    release: str | None = None,
    machine: str | None = None,
    modules_dir: Path = Path("/lib/modules"),
    src_dir: Path = Path("/usr/src"),
) -> KernelHeaders:
    """The headers to compile with, or SourceError(NO_HEADERS) saying where it looked."""
    uts = os.uname()
    running = release or uts.release
    arch = kernel_arch(machine or uts.machine)
    tried: list[str] = []

    own = modules_dir / running
    found = _modules_tree(own, arch)
    if found is not None:
        source, build = found
        return KernelHeaders(RUNNING, source, build, _release(build or source), running, True, arch)
    tried.append(f"{own}/build")

    if configured is not None:
        found = _modules_tree(configured, arch) or _tree(configured, arch)
        if found is None:
            raise SourceError(
                NO_HEADERS,
                f"--ebpf.kernel-headers {configured} holds no usable kernel headers "
                f"(needs {_KCONFIG} and {_AUTOCONF}, or a build dir whose Makefile includes them)",
            )
        source, build = found
        return KernelHeaders(
            CONFIGURED, source, build, _release(build or source), running, False, arch
        )
    tried.append("--ebpf.kernel-headers (not set)")

    for candidate in _generic_candidates(src_dir):
        found = _tree(candidate, arch)
        if found is not None:
            source, build = found
            return KernelHeaders(
                GENERIC, source, build, _release(build or source), running, False, arch
            )
    tried.append(f"{src_dir}/linux-headers-*")
    raise SourceError(NO_HEADERS, "looked in " + ", ".join(tried))


def _tree(path: Path, arch: str) -> tuple[Path, Path | None] | None:
    """(source, build) for a full tree or a split build dir, or None."""
    if not path.is_dir():
        return None
    has_generated = (path / _AUTOCONF).is_file()
    if (path / _KCONFIG).is_file():
        return (path, None) if has_generated and _for_arch(path, arch) else None
    if not (has_generated and (path / "arch" / arch / "include" / "generated").is_dir()):
        return None
    source = _split_source(path)
    if source is None:
        return None
    return source, path


def _for_arch(tree: Path, arch: str) -> bool:
    """False when the tree holds arch/ directories but not this machine's: a kernel source tree
    holds them all, a merged or packaged header set only its own (Debian's -common half holds
    them all too, so only the generated half decides for a split pair)."""
    arches = tree / "arch"
    if not arches.is_dir():
        return True  # nothing says which: bcc's own -I arch/<arch>/include will tell
    return (arches / arch).is_dir()


def _modules_tree(path: Path, arch: str) -> tuple[Path, Path | None] | None:
    """A /lib/modules/<release> directory: build/ (and source/ when split)."""
    build = path / "build"
    if not build.is_dir():
        return None
    source = path / "source"
    if source.is_dir() and (source / _KCONFIG).is_file() and (build / _AUTOCONF).is_file():
        if source.resolve() == build.resolve():
            return build, None
        return source, build
    return _tree(build, arch)


def _split_source(build: Path) -> Path | None:
    """The plain-header tree a Debian/Ubuntu build dir refers to."""
    try:
        makefile = read_text_bounded(str(build / "Makefile"), _MAX_HEADER_FILE)
    except OSError:
        makefile = ""
    candidates = [Path(m) for m in _MAKEFILE_INCLUDE.findall(makefile)]
    name = build.resolve().name
    for flavour_sep in range(name.count("-"), 0, -1):
        # linux-headers-6.1.0-56-amd64 -> linux-headers-6.1.0-56-common
        stem = name.rsplit("-", flavour_sep)[0]
        candidates.append(build.resolve().parent / f"{stem}-common")
    for c in candidates:
        tree = c if c.is_absolute() else build / c
        if (tree / _KCONFIG).is_file():
            return tree
    return None


def _generic_candidates(src_dir: Path) -> Iterator[Path]:
    """linux-headers-* directories under src_dir, newest version first."""
    try:
        names = [
            e.name
            for e in os.scandir(src_dir)
            if e.name.startswith("linux-headers-") and e.is_dir()
        ]
    except OSError:
        return
    for name in sorted(names, key=_version_key, reverse=True):
        yield src_dir / name


def _version_key(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _VERSION_PART.findall(name))


def _release(tree: Path) -> str:
    try:
        text = read_text_bounded(str(tree / _UTSRELEASE), _MAX_HEADER_FILE)
    except OSError:
        return ""
    match = re.search(r'UTS_RELEASE\s+"([^"]*)"', text)
    return match.group(1) if match else ""
