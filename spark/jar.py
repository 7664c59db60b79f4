"""The Strata jar: the JVM reader of segment slices (``spark/jvm``), built on first use.

    spark = (SparkSession.builder.config("spark.jars", strata_jar()).getOrCreate())
    spark.dataSource.register(StrataDataSource)

or on the command line: ``spark-submit --jars "$(python -m spark.jar)" ...``.

With the jar on Spark's classpath, ``format("strata")`` is served by
``io.strata.spark.StrataProvider``: the Python source still plans (it registers
as ``strata_python``), and executors read the planned segment slices in the JVM,
straight into Spark column vectors (ADR 0006). Without the jar the Python source
does everything, more slowly.

The jar is compiled against the installed PySpark's jars with ``javac`` (a JDK
17+) and cached in ``$STRATA_CACHE_DIR`` (default ``~/.cache/strata``) under a
name that changes with the sources and the Spark version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["PROVIDER_CLASS", "PYTHON_NAME", "JarBuildError", "strata_jar"]

SOURCES = Path(__file__).resolve().parent / "jvm"
PROVIDER_CLASS = "io.strata.spark.StrataProvider"
#: the name the Python source registers under when the jar is loaded (the JVM one is "strata")
PYTHON_NAME = "strata_python"
_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


class JarBuildError(RuntimeError):
    """The jar could not be compiled (no JDK, or a compiler error)."""


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if not found:
        raise JarBuildError(
            "building the Strata jar needs javac (a JDK 17 or later): install one (Debian: "
            "apt-get install openjdk-17-jdk-headless) or set JAVA_HOME; without the jar, register "
            "StrataDataSource alone and the Python reader serves format('strata')"
        )
    return found


def strata_jar(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """Path of the jar for the installed PySpark, compiled first if it is not cached yet."""
    import pyspark

    sources = sorted(SOURCES.rglob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for src in sources:
        digest.update(src.relative_to(SOURCES).as_posix().encode())
        digest.update(src.read_bytes())
    cache = Path(cache_dir or os.environ.get("STRATA_CACHE_DIR") or Path.home() / ".cache" / "strata")
    jar = cache / f"strata-spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jar"
    if jar.exists():
        return str(jar)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="strata-jar-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = [_javac(), "--release", "17", "-nowarn", "-encoding", "UTF-8",
               "-cp", str(_spark_jars() / "*"), "-d", str(classes), *map(str, sources)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise JarBuildError(f"javac failed building the Strata jar:\n{done.stderr.strip()}")
        staged = cache / f".{jar.name}.{os.getpid()}.tmp"  # same file system: the rename is atomic
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            out.writestr(_SERVICE, PROVIDER_CLASS + "\n")
            for f in sorted(classes.rglob("*.class")):
                out.write(f, f.relative_to(classes).as_posix())
        os.replace(staged, jar)  # atomic: a concurrent build writes the same bytes
    return str(jar)


def main() -> int:
    try:
        print(strata_jar())
    except JarBuildError as exc:
        print(f"strata: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
