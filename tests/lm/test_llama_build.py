"""Building the embedded server from pinned source, without compiling anything: the source must match its pinned
SHA-256, only its ``vendor/llama.cpp`` is used, CMake gets the portable and offline flags, a failed build is an
error with the log's tail and the command to run again, a finished build is reused, and the binary found is the
user's own (``DSPY_FOR_LLAMA_SERVER``) or the build's."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import ServerError
from dspy_for.lm import llama_build
from dspy_for.lm.registry import LlamaServerSource, llama_server_source


def _sdist(path: Path) -> Path:
    """A tiny stand-in for the llama-cpp-python sdist: its own files and a vendored llama.cpp."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in {
            "llama_cpp_python-9.9/pyproject.toml": "[project]\n",
            "llama_cpp_python-9.9/vendor/llama.cpp/CMakeLists.txt": "project(llama.cpp)\n",
            "llama_cpp_python-9.9/vendor/llama.cpp/tools/server/server.cpp": "int main() {}\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def pinned(tmp_path, monkeypatch):
    """The stand-in sdist pinned by its own SHA-256, a build directory of the test's own, and a fake ``cmake`` on PATH
    that logs its arguments (``$FAKE_CMAKE_FAIL``: exit 2; else ``--build`` writes a llama-server that prints a
    version)."""
    sdist = _sdist(tmp_path / "llama_cpp_python-9.9.tar.gz")
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    monkeypatch.setattr(
        llama_build, "llama_server_source", lambda: LlamaServerSource("llama-cpp-python==9.9", sha, "c0ffee1")
    )
    monkeypatch.setenv("DSPY_FOR_LLAMA_BUILD_DIR", str(tmp_path / "builds"))
    monkeypatch.delenv("DSPY_FOR_LLAMA_SERVER", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cmake = bin_dir / "cmake"
    cmake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{tmp_path}/cmake.log"\n'
        'if [ -n "$FAKE_CMAKE_FAIL" ]; then echo "CMake Error: no compiler found" >&2; exit 2; fi\n'
        'if [ "$1" = "--build" ]; then mkdir -p "$2/bin"; '
        'printf \'#!/bin/sh\\necho "version: 0.5.0-dev (build 0, commit c0ffee1)" >&2\\n\' > "$2/bin/llama-server"; '
        'chmod +x "$2/bin/llama-server"; fi\n'
    )
    cmake.chmod(0o755)
    monkeypatch.setattr(llama_build, "_tool", lambda name: str(cmake) if name == "cmake" else "/usr/bin/c++")
    return sdist, tmp_path / "cmake.log"


def test_the_pin_lives_beside_the_model_registry():
    source = llama_server_source()
    assert source.sdist == "llama-cpp-python==0.3.36" and len(source.sha256) == 64 and source.llama_cpp_commit


def test_the_build_is_portable_and_reaches_no_network():
    flags = llama_build.cmake_flags()
    for flag in ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF",
                 "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"):  # fmt: skip
        assert flag in flags
    assert f"-DLLAMA_BUILD_COMMIT={llama_server_source().llama_cpp_commit}" in flags


def test_a_build_is_keyed_by_its_source_and_flags(pinned, monkeypatch):
    first = llama_build.build_dir()
    assert first.name.startswith(llama_build.llama_server_source().sha256[:12])
    monkeypatch.setattr(llama_build, "OFFLINE_FLAGS", (*llama_build.OFFLINE_FLAGS, "-DGGML_CUDA=ON"))
    assert llama_build.build_dir() != first and llama_build.build_dir().parent == first.parent


def test_a_source_that_does_not_match_its_pin_is_refused_before_anything_runs(pinned, tmp_path):
    _, cmake_log = pinned
    other = tmp_path / "other.tar.gz"
    other.write_bytes(b"not the pinned sdist")
    with pytest.raises(ServerError, match=r"not the pinned .*refusing to build"):
        llama_build.build_server(sdist=other)
    assert not cmake_log.exists()


def test_a_build_uses_the_vendored_llama_cpp_with_the_flags_and_is_reused(pinned):
    sdist, cmake_log = pinned
    lines: list[str] = []
    binary = llama_build.build_server(sdist=sdist, jobs=3, progress=lines.append)
    configure, build = cmake_log.read_text().splitlines()
    assert configure.split()[1].endswith("vendor/llama.cpp") and " ".join(llama_build.cmake_flags()) in configure
    assert build.split()[-4:] == ["--target", "llama-server", "-j", "3"]
    record = json.loads((llama_build.build_dir() / "build.json").read_text())
    assert record["sha256"] == llama_build.llama_server_source().sha256 and "commit c0ffee1" in record["version"]
    found = llama_build.server_build()
    assert found.binary == binary and found.fingerprint == "b0-c0ffee1" and found.label == "llama.cpp b0-c0ffee1"
    assert any("compiling llama-server" in line for line in lines)
    assert llama_build.build_server(sdist=sdist) == binary
    assert len(cmake_log.read_text().splitlines()) == 2  # built already: nothing ran


def test_a_failed_build_says_why_and_what_to_run(pinned, monkeypatch):
    sdist, _ = pinned
    monkeypatch.setenv("FAKE_CMAKE_FAIL", "1")
    with pytest.raises(
        ServerError, match=r"Building llama-server failed(.|\n)*no compiler found(.|\n)*models build-server"
    ):
        llama_build.build_server(sdist=sdist)
    with pytest.raises(ServerError, match=r"not built yet"):
        llama_build.server_build()  # a failed build leaves no binary behind


def test_a_missing_cmake_or_compiler_is_named_with_the_install_command(pinned, monkeypatch):
    monkeypatch.setattr(llama_build, "_tool", lambda name: None if name == "cmake" else "/usr/bin/c++")
    with pytest.raises(ServerError, match=r"needs CMake: `pip install cmake`.*models build-server"):
        llama_build.build_server(sdist=pinned[0])
    monkeypatch.setattr(llama_build, "_tool", lambda name: None if name == "c++" else "/usr/bin/cmake")
    with pytest.raises(ServerError, match=r"needs a C\+\+ compiler"):
        llama_build.build_server(sdist=pinned[0])


def test_cmake_beside_this_python_comes_before_the_one_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "cmake").write_text("#!/bin/sh\n")
    (bin_dir / "cmake").chmod(0o755)
    monkeypatch.setattr(llama_build.sys, "executable", str(bin_dir / "python"))
    assert llama_build._tool("cmake") == str(bin_dir / "cmake")
    monkeypatch.setattr(llama_build.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert llama_build._tool("c++") == "/usr/bin/c++"


def test_a_users_own_llama_server_is_named_by_its_version(tmp_path, monkeypatch):
    own = tmp_path / "llama-server"
    own.write_text("#!/bin/sh\necho 'version: 6500 (abc1234)'\n")
    own.chmod(0o755)
    monkeypatch.setenv("DSPY_FOR_LLAMA_SERVER", str(own))
    found = llama_build.server_build()
    assert found.binary == own and found.own and found.label == "llama.cpp b6500-abc1234 own-build"
    assert llama_build.fingerprint_of("nothing") == "unknown"


def test_the_cli_builds_and_reports_errors_with_exit_2(pinned, tmp_path):
    sdist, _ = pinned
    runner = CliRunner()
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"x")
    result = runner.invoke(app, ["models", "build-server", "--sdist", str(bad)])
    assert result.exit_code == 2 and "refusing to build" in " ".join(result.output.split())  # (however it wraps)
    result = runner.invoke(app, ["models", "build-server", "--sdist", str(sdist)])
    assert result.exit_code == 0 and "llama-server →" in " ".join(result.output.split())
