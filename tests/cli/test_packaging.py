"""The packaging (issue: fit the HPC ecosystem): the Spack recipe, the
Dockerfile and the Apptainer definition, checked against the build they
package, without Spack, Docker or Apptainer and without the iotest binary.

The Spack recipe is executed with a small fake `spack.package` module that
records its directives, so the class body really runs, and its cmake_args()
is called for two specs. CMakeLists.txt is read at test time: every package
it finds must be a dependency of the recipe (through the explicit table
below), and every cache variable the recipe sets must be declared there.
"""
import ast
import contextlib
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "spack" / "packages" / "iotest" / "package.py"
REPO_YAML = ROOT / "spack" / "repo.yaml"
DOCKERFILE = ROOT / "containers" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEFFILE = ROOT / "containers" / "iotest.def"

# ---------------------------------------------------------------------------
# What CMake finds -> the Spack packages that provide it (any one will do).
# A name CMake finds that is missing here fails the test: add it, and the
# dependency to the recipe.

# find_package(<name>)
FIND_PACKAGE_TO_SPACK = {
    "MPI": {"mpi"},
    "HDF5": {"hdf5"},
    "ZLIB": {"zlib-api", "zlib", "zlib-ng"},
    "CLI11": {"cli11"},
    "fmt": {"fmt"},
    "nlohmann_json": {"nlohmann-json"},
    "GTest": {"googletest"},
    "PkgConfig": {"pkgconfig", "pkgconf", "pkg-config"},
    "FFTW3": {"fftw-api", "fftw"},
    "LAPACKE": {"netlib-lapack", "lapack", "openblas"},
    "CUDAToolkit": {"cuda"},
    "CURL": {"curl"},
    "LibXml2": {"libxml2"},
}
# Found through the compiler, not a Spack package (the reason is the value).
FROM_THE_COMPILER = {
    "OpenMP": "the compiler's runtime; the recipe has an `openmp` variant",
    "Threads": "the C library",
}
# pkg-config modules (pkg_check_modules, pkg_search_module, and the PKG
# argument of cmake/FindIotestLibrary.cmake's iotest_find_library).
PKG_CONFIG_TO_SPACK = {
    "fftw3": {"fftw-api", "fftw"},
    "lapacke": {"netlib-lapack", "lapack", "openblas"},
    "hdf5": {"hdf5"},
    "hdf5-openmpi": {"hdf5"},
    "hdf5-mpich": {"hdf5"},
    "hdf5-serial": {"hdf5"},
    "zlib": {"zlib-api", "zlib", "zlib-ng"},
    "fmt": {"fmt"},
    "libisal": {"isa-l"},
    "cfitsio": {"cfitsio"},
    "libcurl": {"curl"},
    "libxml-2.0": {"libxml2"},
}
# project(... LANGUAGES ...) -> Spack's language virtuals.
LANGUAGE_TO_SPACK = {"C": "c", "CXX": "cxx", "Fortran": "fortran"}
# Dependency types a package must have (default: anything).
REQUIRED_TYPES = {"googletest": "test", "pkgconfig": "build", "cmake": "build",
                  "c": "build", "cxx": "build"}

ARCH_VALUES = {"native", "x86-64-v3", "generic"}

# Debian 12 (bookworm) packages the containers may install: the list of
# tools/install-deps.sh, the other MPI flavour and the run-time libraries.
DEBIAN_PACKAGES = {
    # build
    "build-essential", "cmake", "ninja-build", "pkg-config", "git", "ca-certificates",
    "libfftw3-dev", "liblapacke-dev", "libhdf5-dev", "libhdf5-openmpi-dev",
    "libhdf5-mpich-dev", "zlib1g-dev", "libisal-dev", "libcfitsio-dev", "casacore-dev", "libcli11-dev", "libfmt-dev",
    "nlohmann-json3-dev", "libgtest-dev", "libopenmpi-dev", "libmpich-dev",
    "libcurl4-openssl-dev", "libxml2-dev",
    "python3-venv",
    # run time
    "openmpi-bin", "libopenmpi3", "mpich", "libmpich12",
    "libfftw3-double3", "liblapacke", "liblapack3", "libblas3", "libopenblas0",
    "libhdf5-103-1", "libhdf5-openmpi-103-1", "libhdf5-mpich-103-1",
    "zlib1g", "libisal2", "libcfitsio10", "libcurl4", "libxml2",
    "libcasa-ms7", "libcasa-measures7", "libcasa-tables7", "libcasa-casa7", "libfmt9", "libgomp1", "libstdc++6", "libgfortran5",
    "python3", "python3-numpy", "python3-scipy", "python3-matplotlib", "python3-h5py",
}

DOCKERFILE_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY",
    "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL",
    "HEALTHCHECK", "SHELL",
}
APPTAINER_SECTIONS = {"setup", "files", "environment", "post", "runscript", "startscript",
                      "test", "labels", "help", "arguments"}
APPTAINER_APP_SECTIONS = {"apprun", "appinstall", "appenv", "appfiles", "applabels",
                          "apphelp", "apptest"}
# Sections whose body is a shell script.
SHELL_SECTIONS = {"setup", "environment", "post", "runscript", "startscript", "test",
                  "apprun", "appinstall", "appenv", "apptest"}

# An image reference: [registry[:port]/]name[/name...][:tag][@digest].
IMAGE_RE = re.compile(
    r"^(?:[a-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


# ---------------------------------------------------------------------------
# CMake


def cmake_strip_comments(text):
    text = re.sub(r"#\[(=*)\[.*?\]\1\]", "", text, flags=re.S)  # bracket comments
    out = []
    for line in text.splitlines():
        in_quote, cut = False, len(line)
        for i, ch in enumerate(line):
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                in_quote = not in_quote
            elif ch == "#" and not in_quote:
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def cmake_calls(text):
    """[(command, [arguments])] of a CMake file, in order."""
    text = cmake_strip_comments(text)
    calls = []
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i - 1]
        args = [a[1:-1] if a.startswith('"') else a
                for a in re.findall(r'"(?:\\.|[^"\\])*"|[^\s()"]+', body)]
        calls.append((m.group(1).lower(), args))
    return calls


def cmake_files():
    files = [ROOT / "CMakeLists.txt", ROOT / "tests" / "CMakeLists.txt"]
    files += sorted((ROOT / "cmake").glob("*.cmake"))
    return [f for f in files if f.exists()]


def all_cmake_calls():
    calls = []
    for f in cmake_files():
        calls += cmake_calls(f.read_text())
    return calls


def top_cmake_calls():
    """CMakeLists.txt and the modules it includes from cmake/."""
    calls = cmake_calls((ROOT / "CMakeLists.txt").read_text())
    for f in sorted((ROOT / "cmake").glob("*.cmake")):
        calls += cmake_calls(f.read_text())
    return calls


PKG_KEYWORDS = {"REQUIRED", "QUIET", "IMPORTED_TARGET", "GLOBAL", "NO_CMAKE_PATH",
                "NO_CMAKE_ENVIRONMENT_PATH"}


def cmake_found_packages():
    """(find_package names, pkg-config module names) over the CMake files."""
    found, modules = set(), set()
    for name, args in all_cmake_calls():
        if name == "find_package" and args and not args[0].startswith("$"):
            found.add(args[0])
        elif name in ("pkg_check_modules", "pkg_search_module") and len(args) > 1:
            for a in args[1:]:
                if a not in PKG_KEYWORDS and "$" not in a:
                    modules.add(re.split(r"[<>=]", a)[0])
        for i, a in enumerate(args[:-1]):  # iotest_find_library(... PKG name ...)
            if a == "PKG" and "$" not in args[i + 1]:
                modules.add(args[i + 1])
    return found, modules


def cmake_cache_variables():
    """{name: (kind, default)} of option(), cmake_dependent_option() and set(... CACHE)."""
    cache = {}
    for name, args in top_cmake_calls():
        if name in ("option", "cmake_dependent_option") and args:
            default = args[2] if len(args) > 2 and name == "option" else "OFF"
            cache[args[0]] = ("BOOL", default)
        elif name == "set" and "CACHE" in args:
            i = args.index("CACHE")
            cache[args[0]] = (args[i + 1] if i + 1 < len(args) else "STRING",
                              args[1] if i > 1 else "")
    return cache


def cmake_allowed_strings():
    """{variable: [values]} of set_property(CACHE VAR PROPERTY STRINGS ...)."""
    allowed = {}
    for name, args in top_cmake_calls():
        if name == "set_property" and args[:1] == ["CACHE"] and "STRINGS" in args:
            values = []
            for a in args[args.index("STRINGS") + 1:]:
                values += [v for v in a.split(";") if v]
            allowed[args[1]] = values
    return allowed


def cmake_minimum_version():
    for name, args in all_cmake_calls():
        if name == "cmake_minimum_required" and "VERSION" in args:
            return args[args.index("VERSION") + 1].split("...")[0]
    raise AssertionError("CMakeLists.txt has no cmake_minimum_required(VERSION ...)")


def cmake_languages():
    for name, args in cmake_calls((ROOT / "CMakeLists.txt").read_text()):
        if name == "project":
            if "LANGUAGES" in args:
                rest = args[args.index("LANGUAGES") + 1:]
                keywords = {"VERSION", "DESCRIPTION", "HOMEPAGE_URL"}
                langs = []
                for a in rest:
                    if a in keywords:
                        break
                    langs.append(a)
                return langs
            return ["C", "CXX"]  # CMake's default
    raise AssertionError("CMakeLists.txt has no project()")


def version_tuple(text):
    return tuple(int(p) for p in re.findall(r"\d+", text))


# ---------------------------------------------------------------------------
# The Spack recipe, run against a fake spack.package


class Recorder:
    def __init__(self):
        self.directives = []  # (name, args, kwargs, enclosing when= specs)
        self.when_stack = []

    def directive(self, name):
        def record(*args, **kwargs):
            self.directives.append((name, args, kwargs, tuple(self.when_stack)))
        return record

    def calls(self, name):
        return [(a, k, w) for n, a, k, w in self.directives if n == name]


class FakeVariantValue:
    def __init__(self, value):
        self.value = value


class FakeSpec:
    """Just enough of a concrete spec: variants, satisfies(), `in`."""

    def __init__(self, variants):
        self._variants = dict(variants)
        self.variants = {k: FakeVariantValue(v) for k, v in variants.items()}

    def satisfies(self, constraint):
        for c in constraint.split():
            m = re.fullmatch(r"([+~])([\w-]+)|([\w-]+)=([\w.-]+)", c)
            assert m, f"the fake spec cannot evaluate {constraint!r}"
            if m.group(1):
                name, want = m.group(2), m.group(1) == "+"
            else:
                name, want = m.group(3), m.group(4)
            assert name in self._variants, f"{constraint!r}: no variant {name!r}"
            have = self._variants[name]
            if isinstance(have, bool):
                if have != (want if isinstance(want, bool) else want.lower() == "true"):
                    return False
            elif str(have) != str(want):
                return False
        return True

    def __contains__(self, constraint):
        return self.satisfies(constraint)

    def __getitem__(self, name):
        raise KeyError(f"the fake spec has no dependency {name!r}: the recipe's cmake_args "
                       "should not need one")


class FakePrefix(str):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return FakePrefix(f"{self}/{name}")


class FakeExecutable:
    """Records calls; answers like iotest would."""
    calls = []

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, *args, **kwargs):
        FakeExecutable.calls.append((self.path, args))
        if "--version" in args:
            return "0.1.0\n"
        if args[:1] == ("plan",):
            rec = next(a for a in args if a.startswith("--rec-set="))
            return f"iotest plan: {rec.split('=', 1)[1]} (512-256-128)\n  facets 9 (3x3)\n"
        return ""


def fake_spack_modules(recorder):
    spack = types.ModuleType("spack")
    spack.__path__ = []
    pkg = types.ModuleType("spack.package")

    class CMakePackage:
        def __init__(self, spec, run_tests=False, prefix="/opt/spack/iotest"):
            self.spec = spec
            self.run_tests = run_tests
            self.prefix = FakePrefix(prefix)
            self.defined = []

        @staticmethod
        def define(name, value):
            if isinstance(value, bool):
                kind, value = "BOOL", "ON" if value else "OFF"
            elif isinstance(value, (list, tuple)):
                kind, value = "STRING", ";".join(str(v) for v in value)
            else:
                kind, value = "STRING", str(value)
            return f"-D{name}:{kind}={value}"

        def define_from_variant(self, name, variant=None):
            variant = variant or name
            declared = {a[0] for a, _, _ in recorder.calls("variant")}
            assert variant in declared, f"define_from_variant: no variant {variant!r}"
            return self.define(name, self.spec.variants[variant].value)

    @contextlib.contextmanager
    def when(spec):
        recorder.when_stack.append(spec)
        try:
            yield
        finally:
            recorder.when_stack.pop()

    def which(*names, path=None, required=False):
        return FakeExecutable(names[0])

    def passthrough_decorator(*_args, **_kwargs):
        return lambda f: f

    class SkipTest(Exception):
        pass

    class InstallError(Exception):
        pass

    class CudaPackage:
        """Spack's mixin: the cuda and cuda_arch variants, cuda when +cuda."""
        recorder.directive("variant")("cuda", default=False, description="Build with CUDA")
        recorder.directive("variant")("cuda_arch", values=("none", "80", "90"), default="none",
                                      multi=True, description="CUDA architecture")

    names = {
        "CMakePackage": CMakePackage,
        "CudaPackage": CudaPackage,
        "when": when,
        "which": which,
        "Executable": FakeExecutable,
        "join_path": lambda *parts: "/".join(str(p) for p in parts),
        "working_dir": lambda *a, **k: contextlib.nullcontext(),
        "run_before": passthrough_decorator,
        "run_after": passthrough_decorator,
        "on_package_attributes": passthrough_decorator,
        "test_part": lambda *a, **k: contextlib.nullcontext(),
        "any_combination_of": lambda *values: values,
        "disjoint_sets": lambda *sets: sets,
        "conditional": lambda *values, **_: values,
        "SkipTest": SkipTest,
        "InstallError": InstallError,
    }
    for directive in ("version", "variant", "depends_on", "conflicts", "requires", "provides",
                      "license", "maintainers", "patch", "resource", "extends", "build_system",
                      "can_splice", "redistribute"):
        names[directive] = recorder.directive(directive)
    for k, v in names.items():
        setattr(pkg, k, v)
    pkg.__all__ = list(names)
    spack.package = pkg
    return spack, pkg


@pytest.fixture(scope="module")
def recipe():
    """(the Iotest class, the Recorder) with the class body executed."""
    recorder = Recorder()
    spack, pkg = fake_spack_modules(recorder)
    saved = {k: sys.modules.get(k, "absent") for k in ("spack", "spack.package", "spack_repo")}
    sys.modules["spack"], sys.modules["spack.package"] = spack, pkg
    sys.modules["spack_repo"] = None  # not Spack 1.x: the import falls back
    try:
        namespace = {"__name__": "spack.pkg.iotest.iotest", "__file__": str(RECIPE)}
        exec(compile(RECIPE.read_text(), str(RECIPE), "exec"), namespace)
    finally:
        for k, v in saved.items():
            if v == "absent":
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    assert "Iotest" in namespace, "the recipe defines no class Iotest"
    return namespace["Iotest"], recorder


def spec_name(spec):
    """The package a dependency spec names: 'hdf5@1.10:+mpi' -> 'hdf5'."""
    m = re.match(r"[a-z0-9][a-z0-9_-]*", spec)
    return m.group(0) if m else None


def dependencies(recorder):
    """{package name: [(spec, kwargs)]} of the recipe's depends_on."""
    deps = {}
    for args, kwargs, when_stack in recorder.calls("depends_on"):
        if when_stack and "when" not in kwargs:
            kwargs = dict(kwargs, when=" ".join(when_stack))
        deps.setdefault(spec_name(args[0]), []).append((args[0], kwargs))
    return deps


def variants(recorder):
    return {args[0]: kwargs for args, kwargs, _ in recorder.calls("variant")}


def parse_defines(args):
    out = {}
    for a in args:
        m = re.fullmatch(r"-D([A-Za-z_][A-Za-z0-9_]*)(?::([A-Z]+))?=(.*)", a)
        assert m, f"cmake_args: {a!r} is not a -DNAME[:TYPE]=VALUE"
        assert m.group(1) not in out, f"cmake_args defines {m.group(1)} twice"
        out[m.group(1)] = m.group(3)
    return out


def cmake_args_for(cls, run_tests=False, **variant_values):
    return cls(FakeSpec(variant_values), run_tests=run_tests).cmake_args()


def test_the_recipe_is_python_with_a_cmake_package_class():
    tree = ast.parse(RECIPE.read_text(), str(RECIPE))
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Iotest"]
    assert classes, "no class Iotest"
    bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", None)
             for b in classes[0].bases]
    assert "CMakePackage" in bases
    assert ast.get_docstring(classes[0]), "the class needs a docstring (spack info shows it)"
    assert re.search(r"^\s*namespace:\s*iotest\s*$", REPO_YAML.read_text(), re.M)


def test_the_recipe_declares_its_version_license_and_variants(recipe):
    cls, rec = recipe
    assert cls.git.endswith(".git") and cls.homepage.startswith("https://")
    assert (("main",), {"branch": "main"}) in [(a, k) for a, k, _ in rec.calls("version")]
    assert [a for a, _, _ in rec.calls("license")] == [("BSD-3-Clause",)]
    v = variants(rec)
    assert {"phdf5", "openmp", "arch"} <= set(v)
    assert v["phdf5"]["default"] is True and v["openmp"]["default"] is True
    assert set(v["arch"]["values"]) == ARCH_VALUES
    assert len(v["arch"]["values"]) == len(ARCH_VALUES)
    assert v["arch"]["default"] == "generic" and v["arch"].get("multi") is False
    for name, kwargs in v.items():
        assert kwargs.get("description"), f"variant {name} has no description"


def test_the_recipe_rejects_compilers_without_cxx20(recipe):
    _, rec = recipe
    gcc = [a[0] for a, _, _ in rec.calls("conflicts") if a[0].startswith("%gcc@:")]
    assert gcc, "no conflicts('%gcc@:N') for compilers without C++20"
    assert all(version_tuple(g)[0] >= 9 for g in gcc)


def test_the_recipe_depends_on_everything_cmake_finds(recipe):
    _, rec = recipe
    deps = dependencies(rec)
    found, modules = cmake_found_packages()
    unknown = sorted(n for n in found if n not in FIND_PACKAGE_TO_SPACK
                     and n not in FROM_THE_COMPILER)
    unknown += sorted(f"pkg-config:{m}" for m in modules if m not in PKG_CONFIG_TO_SPACK)
    assert not unknown, f"CMake finds {unknown}: add them to the table here and to the recipe"
    assert found, "no find_package() found in the CMake files: the parser is broken"
    needed = {f"find_package({n})": FIND_PACKAGE_TO_SPACK[n]
              for n in found if n in FIND_PACKAGE_TO_SPACK}
    needed.update({f"pkg-config {m}": PKG_CONFIG_TO_SPACK[m] for m in modules})
    for lang in cmake_languages():
        needed[f"LANGUAGES {lang}"] = {LANGUAGE_TO_SPACK[lang]}
    needed["cmake"] = {"cmake"}
    missing = {what: sorted(spack) for what, spack in needed.items() if not spack & set(deps)}
    assert not missing, f"the recipe lacks a dependency for: {missing}"
    if "OpenMP" in found:
        assert "openmp" in variants(rec)
    for name, kind in REQUIRED_TYPES.items():
        for spec, kwargs in deps.get(name, []):
            types_ = kwargs.get("type", ("build", "link"))
            types_ = (types_,) if isinstance(types_, str) else tuple(types_)
            assert kind in types_, f"depends_on({spec!r}) should have type={kind!r}"
    # cmake at least cmake_minimum_required.
    cmake_specs = [s for s, _ in deps["cmake"]]
    assert any(version_tuple(s.split("@", 1)[1].split(":")[0]) >= version_tuple(
        cmake_minimum_version()) for s in cmake_specs if "@" in s), cmake_specs


def test_the_hdf5_dependency_follows_the_phdf5_variant(recipe):
    _, rec = recipe
    hdf5 = dependencies(rec)["hdf5"]
    assert any("+mpi" in s and k.get("when") == "+phdf5" for s, k in hdf5), hdf5
    assert any("~mpi" in s and k.get("when") == "~phdf5" for s, k in hdf5), hdf5
    assert "mpi" in dependencies(rec)


def test_the_recipe_cache_variables_are_declared_by_cmake(recipe):
    cls, _ = recipe
    cache = cmake_cache_variables()
    allowed = cmake_allowed_strings()
    for run_tests, vs in ((False, dict(phdf5=True, openmp=True, arch="generic", cuda=False)),
                          (True, dict(phdf5=False, openmp=False, arch="native", cuda=True,
                                      cuda_arch=("90",)))):
        defines = parse_defines(cmake_args_for(cls, run_tests=run_tests, **vs))
        for name, value in defines.items():
            if name.startswith("CMAKE_"):
                continue  # CMake's own (CMAKE_CUDA_ARCHITECTURES)
            assert name in cache, (f"cmake_args sets {name}, which CMakeLists.txt does not "
                                   "declare with option() or set(... CACHE ...)")
            if cache[name][0] == "BOOL":
                assert value in ("ON", "OFF"), f"{name}={value}: option() wants ON or OFF"
            if name in allowed:
                assert value in allowed[name], f"{name}={value}: CMake accepts {allowed[name]}"


def test_the_arch_values_are_those_cmake_accepts(recipe):
    _, rec = recipe
    allowed = cmake_allowed_strings()
    assert "IOTEST_ARCH" in allowed, \
        "CMakeLists.txt has no set_property(CACHE IOTEST_ARCH PROPERTY STRINGS ...)"
    arch = variants(rec)["arch"]
    assert set(arch["values"]) <= set(allowed["IOTEST_ARCH"])
    # The recipe's default is CMake's default.
    assert cmake_cache_variables()["IOTEST_ARCH"][1] == arch["default"]


@pytest.mark.parametrize("run_tests,vs,expected", [
    (False, dict(phdf5=True, openmp=True, arch="generic", cuda=False),
     {"IOTEST_ARCH": "generic", "IOTEST_OPENMP": "ON", "IOTEST_PARALLEL_HDF5": "ON",
      "IOTEST_BUILD_TESTS": "OFF", "IOTEST_CUDA": "OFF", "CMAKE_CUDA_ARCHITECTURES": None}),
    (True, dict(phdf5=False, openmp=False, arch="native", cuda=True, cuda_arch=("80", "90")),
     {"IOTEST_ARCH": "native", "IOTEST_OPENMP": "OFF", "IOTEST_PARALLEL_HDF5": "OFF",
      "IOTEST_BUILD_TESTS": "ON", "IOTEST_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "80;90"}),
])
def test_cmake_args_follow_the_variants(recipe, run_tests, vs, expected):
    cls, _ = recipe
    defines = parse_defines(cmake_args_for(cls, run_tests=run_tests, **vs))
    assert {k: defines.get(k) for k in expected} == expected


def test_the_smoke_tests_run_version_and_plan(recipe):
    cls, _ = recipe
    tests = sorted(n for n in vars(cls) if n.startswith("test_") and callable(getattr(cls, n)))
    assert tests, "no stand-alone test_* method"
    FakeExecutable.calls.clear()
    package = cls(FakeSpec(dict(phdf5=True, openmp=True, arch="generic")))
    for name in tests:
        getattr(package, name)()
    ran = [args for path, args in FakeExecutable.calls if path.endswith("/bin/iotest")]
    assert ("--version",) in ran, ran
    assert ("plan", "--rec-set=T05_") in ran, ran


# ---------------------------------------------------------------------------
# Shell helpers (the RUN lines and %post): apt packages, variables


def shell_assignments(script):
    """NAME="words" and NAME='words' assignments (multi-line allowed)."""
    found = {}
    for m in re.finditer(r"(?m)^\s*(?:export\s+)?([A-Za-z_]\w*)=([\"'])(.*?)\2", script, re.S):
        found[m.group(1)] = " ".join(m.group(3).replace("\\\n", " ").split())
    return found


def apt_installs(script):
    """The packages of every `apt-get install` / `apt install` in a script."""
    variables = shell_assignments(script)
    script = script.replace("\\\n", " ")
    packages = []
    for command in re.split(r"&&|\|\||;|\n|\|", script):
        words = command.split()
        for tool in ("apt-get", "apt"):
            if tool in words and "install" in words[words.index(tool):]:
                i = words.index("install", words.index(tool))
                for w in words[i + 1:]:
                    var = re.fullmatch(r"\$\{?(\w+)\}?", w)
                    if var:
                        assert var.group(1) in variables, f"${var.group(1)} is not set"
                        packages += variables[var.group(1)].split()
                    elif not w.startswith("-"):
                        packages.append(w)
    return packages


def check_debian_packages(packages, where):
    assert packages, f"{where}: no apt-get install found"
    unknown = sorted(set(packages) - DEBIAN_PACKAGES)
    assert not unknown, f"{where} installs packages not in Debian bookworm's list: {unknown}"


# ---------------------------------------------------------------------------
# Dockerfile


def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuations joined and comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue  # comments (and parser directives), also inside continuations
        if not stripped and not pending:
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word, rest.strip()))
    assert not pending, "the Dockerfile ends inside a line continuation"
    return out


def dockerfile_stages(instructions):
    """[{'name', 'image', 'instructions'}] and the global ARG defaults."""
    global_args, stages = {}, []
    for word, rest in instructions:
        if word.upper() == "FROM":
            words = rest.split()
            words = [w for w in words if not w.startswith("--platform=")]
            assert len(words) in (1, 3), f"FROM {rest}: expected IMAGE [AS NAME]"
            name = None
            if len(words) == 3:
                assert words[1].upper() == "AS", f"FROM {rest}"
                name = words[2]
                assert re.fullmatch(r"[a-z][a-z0-9_.-]*", name), f"stage name {name!r}"
            stages.append({"name": name, "image": words[0], "instructions": []})
        elif not stages:
            assert word.upper() == "ARG", f"{word} before the first FROM (only ARG may be)"
            key, _, default = rest.partition("=")
            global_args[key.strip()] = default.strip().strip('"')
        else:
            stages[-1]["instructions"].append((word.upper(), rest))
    return stages, global_args


def expand(text, variables):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)",
                  lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)


def test_the_dockerfile_uses_known_instructions_and_valid_stages():
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    assert instructions
    bad = [w for w, _ in instructions if w.upper() not in DOCKERFILE_INSTRUCTIONS]
    assert not bad, f"unknown Dockerfile instructions: {bad}"
    first = next(w for w, _ in instructions if w.upper() != "ARG")
    assert first.upper() == "FROM", f"the first instruction after the ARGs is {first}"
    stages, global_args = dockerfile_stages(instructions)
    assert len(stages) >= 2, "multi-stage: a build stage and a runtime stage"
    names = [s["name"] for s in stages if s["name"]]
    assert len(names) == len(set(names)), f"stage names repeat: {names}"
    earlier = set()
    for s in stages:
        image = expand(s["image"], global_args)
        assert image in earlier or IMAGE_RE.match(image), f"FROM {s['image']} -> {image!r}"
        for word, rest in s["instructions"]:
            m = re.search(r"--from=(\S+)", rest)
            if word == "COPY" and m:
                assert m.group(1) in earlier, f"COPY --from={m.group(1)}: no earlier stage"
        if s["name"]:
            earlier.add(s["name"])
    assert expand(stages[0]["image"], global_args).startswith("debian:bookworm")


def test_the_dockerfile_builds_with_the_preset_and_passes_the_arch():
    stages, _ = dockerfile_stages(dockerfile_instructions(DOCKERFILE.read_text()))
    build = next(s for s in stages if any("cmake --preset" in r for w, r in s["instructions"]
                                          if w == "RUN"))
    args = {}
    arch_passed = False
    for word, rest in build["instructions"]:
        if word == "ARG":
            key, _, default = rest.partition("=")
            args[key.strip()] = default.strip().strip('"')
        if word == "RUN" and "cmake --preset" in rest:
            assert re.search(r"cmake --preset release\b", rest)
            assert "-DIOTEST_BUILD_TESTS=OFF" in rest
            m = re.search(r"-DIOTEST_ARCH=\"?\$\{?(\w+)\}?", rest)
            assert m and m.group(1) == "IOTEST_ARCH", "ARG IOTEST_ARCH is not passed to CMake"
            assert "IOTEST_ARCH" in args, "ARG IOTEST_ARCH comes after its use (or is absent)"
            arch_passed = True
        if word == "RUN" and "cmake --install" in rest:
            assert "/opt/iotest" in rest
    assert arch_passed
    assert args["IOTEST_ARCH"] == "generic"
    final = stages[-1]
    assert final is not build
    copies = [r for w, r in final["instructions"] if w == "COPY"]
    assert any("--from=" in c and "/opt/iotest" in c for c in copies), copies
    assert any(w in ("CMD", "ENTRYPOINT") and "iotest" in r for w, r in final["instructions"])


def test_the_dockerfile_installs_debian_packages_and_a_lean_runtime():
    stages, _ = dockerfile_stages(dockerfile_instructions(DOCKERFILE.read_text()))
    for s in stages:
        script = "\n".join(r for w, r in s["instructions"] if w == "RUN")
        check_debian_packages(apt_installs(script), f"Dockerfile stage {s['name']}")
    build = apt_installs("\n".join(r for w, r in stages[0]["instructions"] if w == "RUN"))
    assert {"cmake", "libhdf5-openmpi-dev", "libopenmpi-dev"} <= set(build)
    runtime = apt_installs("\n".join(r for w, r in stages[-1]["instructions"] if w == "RUN"))
    heavy = [p for p in runtime if p.endswith("-dev") or p in ("build-essential", "cmake")]
    assert not heavy, f"the runtime stage installs build packages: {heavy}"
    assert {"libopenmpi3", "libhdf5-openmpi-103-1"} <= set(runtime)


def test_the_dockerfile_copies_only_what_exists():
    stages, _ = dockerfile_stages(dockerfile_instructions(DOCKERFILE.read_text()))
    sources = []
    for s in stages:
        for word, rest in s["instructions"]:
            if word not in ("COPY", "ADD") or "--from=" in rest:
                continue
            if rest.startswith("["):
                paths = json.loads(rest)
            else:
                paths = [w for w in rest.split() if not w.startswith("--")]
            sources += paths[:-1]
    assert sources, "nothing is copied from the build context"
    for src in sources:
        exists = any(ROOT.glob(src)) if re.search(r"[*?[]", src) else (ROOT / src).exists()
        assert exists, f"COPY {src}: not in the repo"


def test_the_dockerignore_keeps_build_trees_out():
    patterns = {line.strip().rstrip("/") for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    for path in ("build", "build-debug", ".venv", "out", ".git"):
        assert any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), path)
                   for p in patterns), f".dockerignore does not exclude {path}/"


# ---------------------------------------------------------------------------
# Apptainer definition


def def_file():
    """(header {key: value}, [(section, app name or None, body)])."""
    header, sections, current = {}, [], None
    for line in DEFFILE.read_text().splitlines():
        m = re.match(r"^%(\w+)(?:\s+(\S+))?\s*$", line)
        if m:
            current = [m.group(1), m.group(2), []]
            sections.append(current)
        elif line.lstrip().startswith("%"):
            raise AssertionError(f"a line starting with % is not a section header: {line!r}")
        elif current is None:
            if line.strip() and not line.lstrip().startswith("#"):
                key, sep, value = line.partition(":")
                assert sep, f"header line without a colon: {line!r}"
                header[key.strip()] = value.strip()
        else:
            current[2].append(line)
    return header, [(s, a, "\n".join(body)) for s, a, body in sections]


def build_arguments(sections):
    args = {}
    for s, _, body in sections:
        if s == "arguments":
            for line in body.splitlines():
                if line.strip() and not line.strip().startswith("#"):
                    key, _, value = line.strip().partition("=")
                    args[key.strip()] = value.strip()
    return args


def substitute(body, args):
    def one(m):
        assert m.group(1) in args, f"{{{{ {m.group(1)} }}}} has no default in %arguments"
        return args[m.group(1)]
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", one, body)


def test_the_def_file_has_a_header_and_known_sections():
    header, sections = def_file()
    assert header.get("Bootstrap") == "docker"
    assert IMAGE_RE.match(header.get("From", "")), header
    assert header["From"].startswith("debian:bookworm")
    assert sections
    for name, app, _ in sections:
        if name in APPTAINER_APP_SECTIONS:
            assert app, f"%{name} needs an app name"
        else:
            assert name in APPTAINER_SECTIONS, f"unknown section %{name}"
            assert app is None, f"%{name} takes no argument"
    seen = [(n, a) for n, a, _ in sections]
    assert len(seen) == len(set(seen)), "a section appears twice"
    for flavour in ("openmpi", "mpich"):
        assert ("apprun", flavour) in seen and ("appenv", flavour) in seen
    for name in ("post", "runscript", "test", "help", "labels", "files"):
        assert (name, None) in seen, f"no %{name}"


def test_the_def_file_shell_bodies_parse():
    bash = shutil.which("bash")
    assert bash, "bash is needed to check the shell sections"
    _, sections = def_file()
    args = build_arguments(sections)
    checked = 0
    for name, app, body in sections:
        if name not in SHELL_SECTIONS:
            continue
        proc = subprocess.run([bash, "-n"], input=substitute(body, args), text=True,
                              capture_output=True)
        assert proc.returncode == 0, f"%{name} {app or ''}: {proc.stderr}"
        checked += 1
    assert checked >= 6


def test_the_def_file_builds_one_flavour_per_mpi():
    _, sections = def_file()
    post = next(b for n, _, b in sections if n == "post")
    check_debian_packages(apt_installs(post), "%post")
    variables = shell_assignments(post)
    openmpi = " ".join(v for k, v in variables.items() if "openmpi" in k.lower()).split()
    mpich = " ".join(v for k, v in variables.items() if "mpich" in k.lower()).split()
    assert {"libhdf5-openmpi-dev", "libopenmpi-dev"} <= set(openmpi), openmpi
    assert "libmpich-dev" in mpich and not any("openmpi" in p for p in mpich), mpich
    installed = set(apt_installs(post))
    assert set(openmpi) | set(mpich) <= installed

    joined = post.replace("\\\n", " ")
    configures = [line for line in joined.splitlines() if re.search(r"\bcmake\s+--preset", line)]
    by_mpi = {}
    for line in configures:
        m = re.search(r"-DMPI_CXX_COMPILER=\S*mpicxx\.(openmpi|mpich)", line)
        assert m, f"a configure line without an MPI_CXX_COMPILER: {line.strip()}"
        by_mpi[m.group(1)] = line
        assert re.search(r"-DIOTEST_ARCH=\"?\{\{\s*IOTEST_ARCH\s*\}\}", line), line
    assert set(by_mpi) == {"openmpi", "mpich"}
    assert "-DIOTEST_PARALLEL_HDF5=OFF" in by_mpi["mpich"]
    assert "-DIOTEST_PARALLEL_HDF5=OFF" not in by_mpi["openmpi"]
    installs = [line for line in joined.splitlines() if "cmake --install" in line]
    for flavour in ("openmpi", "mpich"):
        assert any(f"/opt/iotest-{flavour}" in line for line in installs), installs
    body = {(n, a): b for n, a, b in sections}
    for flavour in ("openmpi", "mpich"):
        assert f"/opt/iotest-{flavour}/bin/iotest" in body[("apprun", flavour)]
        assert f"/opt/iotest-{flavour}/bin" in body[("appenv", flavour)]
        assert "LD_LIBRARY_PATH" in body[("appenv", flavour)]
        assert re.search(rf"/opt/iotest-(\$\w+|{flavour})/bin/iotest\"? --version",
                         body[("test", None)])
    assert "/opt/iotest-openmpi/bin/iotest" in body[("runscript", None)]
    assert build_arguments(sections).get("IOTEST_ARCH") == "generic"


def test_the_def_file_copies_only_what_exists():
    _, sections = def_file()
    files = next(b for n, _, b in sections if n == "files")
    sources = [line.split()[0] for line in files.splitlines()
               if line.strip() and not line.strip().startswith("#")]
    assert "CMakeLists.txt" in sources and "src" in sources
    for src in sources:
        assert (ROOT / src).exists(), f"%files {src}: not in the repo"
    # Whatever CMakeLists.txt installs must be copied in.
    for name, args in cmake_calls((ROOT / "CMakeLists.txt").read_text()):
        if name == "install" and args[:1] == ["FILES"]:
            for f in args[1:args.index("DESTINATION")]:
                assert f.split("/")[0] in sources, f"install(FILES {f}) is not in %files"
