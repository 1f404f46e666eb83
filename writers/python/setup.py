"""Builds microview._microview against libmicroview.

Where libmicroview comes from, first match wins (give absolute paths: pip builds in a copy):
  MICROVIEW_INCLUDE_DIR (dir of microview.h) and MICROVIEW_LIBRARY (libmicroview.a or .so);
  pkg-config libmicroview (an installed libmicroview; its static archive is preferred so
  the extension has no run-time dependency).
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "libmicroview"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out)


def libmicroview():
    inc, lib = os.environ.get("MICROVIEW_INCLUDE_DIR"), os.environ.get("MICROVIEW_LIBRARY")
    if inc and lib:
        return [inc], [lib], [], []
    cflags, libdir = pkg_config("--cflags-only-I"), pkg_config("--variable=libdir")
    if cflags is None or not libdir:
        raise SystemExit("libmicroview not found: install it (cmake --install, pkg-config "
                         "libmicroview) or set MICROVIEW_INCLUDE_DIR and MICROVIEW_LIBRARY")
    dirs = [f[2:] for f in cflags if f.startswith("-I")]
    static = os.path.join(libdir[0], "libmicroview.a")
    if os.path.exists(static):
        return dirs, [static], [], []
    return dirs, [], ["microview"], libdir


inc, objs, libs, libdirs = libmicroview()
setup(ext_modules=[Extension(
    "microview._microview",
    sources=["src/microview/_microview.c"],
    include_dirs=inc,
    extra_objects=objs,
    libraries=libs + ["pthread", "m"],
    library_dirs=libdirs,
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
)])
