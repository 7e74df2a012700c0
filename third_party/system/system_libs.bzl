"""Exposes Debian's system libraries to Bazel as cc_library targets.

Headers live on the default include path (/usr/include); link lines come from
pkg-config, so they match the installed packages exactly.
"""

# target name -> (pkg-config modules, extra linkopts)
_LIBS = {
    "absl": ([
        "absl_base",
        "absl_flags",
        "absl_flags_parse",
        "absl_flags_usage",
        "absl_status",
        "absl_statusor",
        "absl_strings",
        "absl_str_format",
        "absl_time",
        "absl_synchronization",
        "absl_hash",
        "absl_raw_hash_set",
        "absl_random_random",
    ], []),
    "protobuf": (["protobuf"], []),
    "grpc": (["grpc++", "protobuf"], ["-lgrpc++_reflection"]),
    "sqlite3": (["sqlite3"], []),
    "gtest": (["gtest", "gmock"], ["-lpthread"]),
    "gtest_main": (["gtest_main"], []),
    "benchmark": (["benchmark"], ["-lpthread"]),
    "prometheus_cpp": (["prometheus-cpp-pull", "prometheus-cpp-core"], ["-lpthread"]),
}

def _system_libs_impl(ctx):
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, spec in _LIBS.items():
        modules, extra = spec
        res = ctx.execute(["pkg-config", "--libs"] + modules)
        if res.return_code != 0:
            fail("pkg-config --libs %s failed (run tools/install-deps.sh): %s" %
                 (" ".join(modules), res.stderr))
        flags = []
        for f in res.stdout.strip().split(" ") + extra:
            if f and f not in flags:
                flags.append(f)
        deps = '["%s"]' % ":gtest" if name == "gtest_main" else "[]"
        build.append("cc_library(")
        build.append('    name = "%s",' % name)
        build.append("    linkopts = %s," % repr(flags))
        build.append("    deps = %s," % deps)
        build.append(")")
        build.append("")
    ctx.file("BUILD", "\n".join(build))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

system_libs = repository_rule(
    implementation = _system_libs_impl,
    local = True,
    environ = ["PATH", "PKG_CONFIG_PATH"],
)
