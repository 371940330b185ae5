"""What a ``pip install`` gets: the MIT license in the wheel and the sdist, the Redis
storage's Lua scripts as package data, the public extras only (the toolchain is a PEP 735
dependency group), and a deprecated old path."""

from __future__ import annotations

import email
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from ..support import project_root

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = pytest.mark.slow


def _metadata(dist: Path) -> email.message.Message:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_carries_the_mit_license(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (license_file,) = [n for n in archive.namelist() if n.endswith("licenses/LICENSE")]
        text = archive.read(license_file).decode()
    assert text.startswith("MIT License")
    assert text == (project_root() / "LICENSE").read_text(encoding="utf-8")
    assert _metadata(dist)["License-Expression"] == "MIT"


def test_the_wheel_carries_every_lua_script(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {
            name.rsplit("/", 1)[1]: archive.read(name).decode()
            for name in archive.namelist()
            if name.startswith("mcp_cancellation/storage/redis/lua/")
        }
    source = project_root() / "src" / "mcp_cancellation" / "storage" / "redis" / "lua"
    expected = {path.name: path.read_text(encoding="utf-8") for path in source.glob("*.lua")}
    assert shipped == expected
    assert {"rows.lua", "owners.lua", "add.lua", "cleanup.lua"} <= set(shipped)


def test_the_sdist_carries_the_license_and_the_dev_script(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "dev", "pyproject.toml", "README.md"} <= names


def test_extras_are_the_runtime_ones_only(dist: Path) -> None:
    extras = set(_metadata(dist).get_all("Provides-Extra") or [])
    assert extras == {
        "redis",
        "mcp",
        "fastmcp",
        "otel",
        "otel-instrumentation",
        "prometheus",
        "dashboards",
        "all",
    }


def test_the_toolchain_is_a_dependency_group() -> None:
    project = tomllib.loads((project_root() / "pyproject.toml").read_text(encoding="utf-8"))
    assert "test" not in project["project"]["optional-dependencies"]
    group = project["dependency-groups"]["test"]
    assert any(requirement.startswith("pytest>=") for requirement in group)
    assert any(requirement.startswith("mypy>=") for requirement in group)
