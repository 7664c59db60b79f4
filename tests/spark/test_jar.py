"""Building the Strata jar (spark/jar.py): cached by sources and Spark version, clear errors."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from spark import jar


def test_the_jar_is_built_once_with_the_provider_registered_as_strata(tmp_path: Path) -> None:
    path = Path(jar.strata_jar(tmp_path))
    assert path.parent == tmp_path and path.suffix == ".jar"
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        service = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
    assert service.strip() == jar.PROVIDER_CLASS
    assert "io/strata/spark/StrataProvider.class" in names and "io/strata/spark/SliceReader.class" in names
    built = path.stat().st_mtime_ns
    assert jar.strata_jar(tmp_path) == str(path)  # cached: not compiled again
    assert path.stat().st_mtime_ns == built
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no staging file left behind


def test_without_a_jdk_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac on it
    with pytest.raises(jar.JarBuildError, match="needs javac .*JDK 17"):
        jar.strata_jar(tmp_path / "cache")
    monkeypatch.setenv("STRATA_CACHE_DIR", str(tmp_path / "cache"))
    assert jar.main() == 1  # python -m spark.jar: a message on stderr, exit status 1
