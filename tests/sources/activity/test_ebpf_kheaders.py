"""Kernel header discovery (exporter.sources.activity.ebpf.kheaders) on header trees laid out like
the
distributions' packages, built in a temporary directory."""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from pathlib import Path

import pytest

from exporter.model.readings import SourceError
from exporter.sources.activity.ebpf.kheaders import (
    CONFIGURED,
    GENERIC,
    NO_HEADERS,
    RUNNING,
    KernelHeaders,
    find_kernel_headers,
    kernel_arch,
)

RUNNING_RELEASE = "6.18.44-test"


def touch(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def full_tree(root: Path, release: str, arch: str = "x86") -> Path:
    touch(root / "include/linux/kconfig.h")
    touch(root / "include/generated/autoconf.h")
    touch(root / "include/generated/utsrelease.h", f'#define UTS_RELEASE "{release}"\n')
    (root / f"arch/{arch}/include/generated").mkdir(parents=True)
    return root


def debian_pair(
    src: Path, version: str, flavour: str = "amd64", arch: str = "x86"
) -> tuple[Path, Path]:
    """linux-headers-<version>-<flavour> (generated, Makefile including -common) + -common."""
    common = src / f"linux-headers-{version}-common"
    build = src / f"linux-headers-{version}-{flavour}"
    touch(common / "include/linux/kconfig.h")
    touch(common / "Makefile")
    touch(build / "Makefile", f"include {common}/Makefile\n")
    touch(build / "include/generated/autoconf.h")
    touch(
        build / "include/generated/utsrelease.h",
        f'#define UTS_RELEASE "{version}-{flavour}"\n',
    )
    (build / f"arch/{arch}/include/generated/uapi").mkdir(parents=True)
    # the -common half holds every architecture's plain headers, as Debian's does
    for each in ("x86", "arm64"):
        (common / f"arch/{each}/include/uapi").mkdir(parents=True, exist_ok=True)
    return build, common


def find(tmp_path: Path, configured: Path | None = None, machine: str = "x86_64") -> KernelHeaders:
    return find_kernel_headers(
        configured,
        release=RUNNING_RELEASE,
        machine=machine,
        modules_dir=tmp_path / "lib/modules",
        src_dir=tmp_path / "usr/src",
    )


def test_running_kernel_headers_win_and_bcc_finds_them_itself(tmp_path: Path) -> None:
    debian_pair(tmp_path / "usr/src", "6.1.0-56")
    full_tree(tmp_path / "lib/modules" / RUNNING_RELEASE / "build", RUNNING_RELEASE)
    h = find(tmp_path)
    assert h.origin == RUNNING and h.native and h.matches_running
    assert h.environment() == {"BCC_KERNEL_SOURCE": None}
    assert h.cflags() == []


def test_running_kernel_split_build_and_source(tmp_path: Path) -> None:
    build, common = debian_pair(tmp_path / "usr/src", RUNNING_RELEASE.removesuffix("-test"))
    modules = tmp_path / "lib/modules" / RUNNING_RELEASE
    modules.mkdir(parents=True)
    (modules / "build").symlink_to(build)
    (modules / "source").symlink_to(common)
    h = find(tmp_path)
    assert h.origin == RUNNING and h.native
    assert h.source == modules / "source" and h.build == modules / "build"


def test_generic_debian_set_when_the_running_kernel_has_none(tmp_path: Path) -> None:
    build, common = debian_pair(tmp_path / "usr/src", "6.1.0-56")
    h = find(tmp_path)
    assert h.origin == GENERIC and not h.native and not h.matches_running
    assert (h.source, h.build, h.release) == (common, build, "6.1.0-56-amd64")
    assert h.environment() == {"BCC_KERNEL_SOURCE": str(common)}
    assert h.cflags() == [
        f"-I{build}/arch/x86/include/generated",
        f"-I{build}/arch/x86/include/generated/uapi",
        f"-I{build}/include",
        f"-I{build}/include/generated/uapi",
    ]
    assert "generic headers 6.1.0-56-amd64" in h.describe()
    assert f"running kernel is {RUNNING_RELEASE}" in h.describe()


def test_newest_generic_set_is_chosen(tmp_path: Path) -> None:
    src = tmp_path / "usr/src"
    debian_pair(src, "6.1.0-9")
    newest, _ = debian_pair(src, "6.1.0-56")
    debian_pair(src, "5.10.0-30")
    assert find(tmp_path).build == newest


def test_set_for_another_architecture_is_skipped(tmp_path: Path) -> None:
    src = tmp_path / "usr/src"
    arm = src / "linux-headers-6.1.0-56-arm64"
    touch(arm / "include/generated/autoconf.h")
    (arm / "arch/arm64/include/generated").mkdir(parents=True)
    touch(src / "linux-headers-6.1.0-56-common/include/linux/kconfig.h")
    with pytest.raises(SourceError) as err:
        find(tmp_path)
    assert err.value.reason == NO_HEADERS


def test_configured_dir_before_generic(tmp_path: Path) -> None:
    debian_pair(tmp_path / "usr/src", "6.1.0-56")
    mine = full_tree(tmp_path / "opt/headers", "5.15.0-1")
    h = find(tmp_path, mine)
    assert (h.origin, h.source, h.build, h.release) == (CONFIGURED, mine, None, "5.15.0-1")
    assert h.environment() == {"BCC_KERNEL_SOURCE": str(mine)}
    assert h.cflags() == []


def test_configured_lib_modules_dir(tmp_path: Path) -> None:
    build, common = debian_pair(tmp_path / "usr/src", "6.1.0-56")
    mod = tmp_path / "mnt/lib/modules/6.1.0-56-amd64"
    mod.mkdir(parents=True)
    (mod / "build").symlink_to(build)
    (mod / "source").symlink_to(common)
    h = find(tmp_path, mod)
    assert h.origin == CONFIGURED and h.source == mod / "source" and h.build == mod / "build"


def test_configured_dir_without_headers_is_an_error_not_a_silent_fallback(tmp_path: Path) -> None:
    debian_pair(tmp_path / "usr/src", "6.1.0-56")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError) as err:
        find(tmp_path, tmp_path / "empty")
    assert err.value.reason == NO_HEADERS
    assert "--ebpf.kernel-headers" in err.value.detail


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        find(tmp_path)
    assert err.value.reason == NO_HEADERS
    detail = err.value.detail
    assert f"lib/modules/{RUNNING_RELEASE}/build" in detail and "linux-headers-*" in detail


def test_leftover_build_dir_without_headers_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "lib/modules" / RUNNING_RELEASE / "build").mkdir(parents=True)
    _, common = debian_pair(tmp_path / "usr/src", "6.1.0-56")
    assert find(tmp_path).source == common


@pytest.mark.parametrize(
    ("machine", "arch"),
    [
        ("x86_64", "x86"),
        ("aarch64", "arm64"),
        ("arm64", "arm64"),
        ("armv7l", "arm"),
        ("ppc64le", "powerpc"),
        ("riscv64", "riscv"),
    ],
)
def test_kernel_arch(machine: str, arch: str) -> None:
    assert kernel_arch(machine) == arch


# -- arm64: Debian's linux-headers-arm64 (linux-headers-<version>-arm64 + -common) -------------


def test_generic_arm64_set_on_an_arm64_node(tmp_path: Path) -> None:
    build, common = debian_pair(tmp_path / "usr/src", "6.1.0-56", "arm64", "arm64")
    h = find(tmp_path, machine="aarch64")
    assert (h.origin, h.source, h.build, h.arch) == (GENERIC, common, build, "arm64")
    assert h.release == "6.1.0-56-arm64"
    assert h.cflags() == [
        f"-I{build}/arch/arm64/include/generated",
        f"-I{build}/arch/arm64/include/generated/uapi",
        f"-I{build}/include",
        f"-I{build}/include/generated/uapi",
    ]


def test_multiarch_usr_src_gives_each_machine_its_own_set(tmp_path: Path) -> None:
    """Both flavours installed side by side (one -common for both): each architecture takes its
    own build tree, whichever sorts first."""
    src = tmp_path / "usr/src"
    amd, _ = debian_pair(src, "6.1.0-56", "amd64", "x86")
    arm, _ = debian_pair(src, "6.1.0-56", "arm64", "arm64")
    assert find(tmp_path, machine="x86_64").build == amd
    assert find(tmp_path, machine="aarch64").build == arm


def test_newer_set_for_another_architecture_does_not_win(tmp_path: Path) -> None:
    src = tmp_path / "usr/src"
    own, _ = debian_pair(src, "6.1.0-9", "arm64", "arm64")
    debian_pair(src, "6.1.0-56", "amd64", "x86")
    assert find(tmp_path, machine="aarch64").build == own


def test_merged_tree_of_another_architecture_is_refused(tmp_path: Path) -> None:
    """The image's merged tree (deploy/image/merge-kernel-headers.sh keeps only its own arch/)
    from an amd64 image on an arm64 node: a configured tree, so an error that says so."""
    merged = full_tree(tmp_path / "opt/wattprobe/kernel-headers", "6.1.0-56-amd64", "x86")
    assert find(tmp_path, merged).arch == "x86"
    with pytest.raises(SourceError) as err:
        find(tmp_path, merged, machine="aarch64")
    assert err.value.reason == NO_HEADERS and str(merged) in err.value.detail


def test_merged_arm64_tree_on_arm64(tmp_path: Path) -> None:
    merged = full_tree(tmp_path / "opt/wattprobe/kernel-headers", "6.1.0-56-arm64", "arm64")
    h = find(tmp_path, merged, machine="aarch64")
    assert (h.origin, h.source, h.build, h.release) == (CONFIGURED, merged, None, "6.1.0-56-arm64")


def test_running_arm64_kernel_headers(tmp_path: Path) -> None:
    full_tree(tmp_path / "lib/modules" / RUNNING_RELEASE / "build", RUNNING_RELEASE, "arm64")
    h = find(tmp_path, machine="aarch64")
    assert h.origin == RUNNING and h.native and h.arch == "arm64"


def test_fifos_in_a_header_tree_do_not_hang_discovery(tmp_path: Path) -> None:
    """A FIFO in place of the build dir's Makefile or utsrelease.h (a hostile or broken node)
    is an unreadable file, not a start-up that waits for a writer forever: the Makefile's
    include is then not followed (Debian's -common sibling is still found by name) and the
    release is unknown."""
    build, common = debian_pair(tmp_path / "usr/src", "6.1.0-56")
    for name in ("Makefile", "include/generated/utsrelease.h"):
        (build / name).unlink()
        os.mkfifo(build / name)
    result: list[KernelHeaders] = []
    finder = threading.Thread(target=lambda: result.append(find(tmp_path)), daemon=True)
    finder.start()
    finder.join(timeout=20)
    if finder.is_alive():
        # unblock the reader (a writer opening the FIFO) before failing, so the run goes on
        for name in ("Makefile", "include/generated/utsrelease.h"):
            with suppress(OSError):
                os.close(os.open(build / name, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("header discovery blocked on a FIFO")
    (h,) = result
    assert (h.origin, h.source, h.build, h.release) == (GENERIC, common, build, "")
