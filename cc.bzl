"""cc_library, cc_test and cc_binary for runreaper's own code.

The native rules plus a precompiled header (pch.bzl): clang parses the
external headers most files include (the standard library, Abseil, the
generated contract; GoogleTest for tests) once per build configuration
instead of once per translation unit, which is most of what a fresh build of
the suite costs. A target whose copts are TEST_COPTS
(tests, testonly helpers) takes //base/pch:test, built with them; one whose
copts are COPTS takes //base/pch:lib; any other target none, since clang
refuses a PCH built with other options than the file's. A target that
depends on @system//:grpc takes the gRPC variant (grpc_test, grpc): the gRPC
headers are half of what such a file costs (server/rpc/service.cc: 6.1 s of
CPU with the lib PCH, 2.7 s with the gRPC one), and a third more for a file
that does not include them.
"""

load("//:copts.bzl", "COPTS", "TEST_COPTS")

def _with_pch(kwargs):
    copts = kwargs.get("copts", [])
    deps = kwargs.get("deps", [])
    if copts == TEST_COPTS:
        name = "test"
    elif copts == COPTS:
        name = "lib"
    else:
        return kwargs
    if "@system//:grpc" in deps:
        name = "grpc" if name == "lib" else "grpc_test"
    kwargs["copts"] = copts + select({
        # No PCH under -c opt (pch.bzl says why): tools/package.sh.
        "//base/pch:opt": [],
        "//conditions:default": ["-include-pch", "$(BINDIR)/base/pch/%s.pch" % name],
    })
    kwargs["deps"] = deps + ["//base/pch:" + name]
    return kwargs

def cc_library(**kwargs):
    native.cc_library(**_with_pch(kwargs))

def cc_test(**kwargs):
    native.cc_test(**_with_pch(kwargs))

def cc_binary(**kwargs):
    native.cc_binary(**_with_pch(kwargs))
