"""Builds the compiled claim/settle core (jobpool/_core.pyx).

The extension links the system's shared libsqlite3, the same library Python's own
``sqlite3`` module loads: two copies of SQLite in one process can break each
other's POSIX locks (sqlite.org, "How To Corrupt An SQLite Database File").
If the compiler or SQLite headers are missing the build still succeeds without the
extension, and ``jobpool.core`` falls back to the pure-Python twin.
"""
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the core if possible; never fail the install because of it."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "pure twin"
            if os.environ.get("JOBPOOL_REQUIRE_CORE") == "1":
                raise
            print(f"jobpool: compiled core not built ({exc}); using the pure-Python core")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            if os.environ.get("JOBPOOL_REQUIRE_CORE") == "1":
                raise
            print(f"jobpool: compiled core not built ({exc}); using the pure-Python core")


def extensions():
    source = os.path.join("jobpool", "_core.pyx")
    try:
        from Cython.Build import cythonize

        # _walbuf.h: the VFS that gathers the WAL's writes, included by _core.pyx.
        ext = Extension("jobpool._core", [source], libraries=["sqlite3"],
                        include_dirs=["jobpool"], depends=[os.path.join("jobpool", "_walbuf.h"),
                                                      os.path.join("jobpool", "_pump.pxi")])
        return cythonize([ext], language_level=3,
                         compiler_directives={"boundscheck": False, "wraparound": False})
    except Exception as exc:  # noqa: BLE001 - no Cython, or the .pyx does not compile
        if os.environ.get("JOBPOOL_REQUIRE_CORE") == "1":
            raise
        print(f"jobpool: compiled core not built ({exc}); using the pure-Python core")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
