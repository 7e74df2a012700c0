"""cc_library, cc_test and cc_binary for runreaper's own code.

The native rules plus the precompiled header (pch.bzl) a target names:
`pch = "lib"` (copts COPTS), `"test"` (TEST_COPTS), `"grpc"` (COPTS) or
`"grpc_test"` (TEST_COPTS), the last two with the gRPC headers too, for
targets that include them; `pch = None` for none. clang parses the external
headers a PCH holds once per build configuration instead of once per
translation unit (docs/CONTRIBUTING.md "Build" has the figures).

Every target names its choice: a target without `pch`, an unknown name, or
copts other than those its PCH is built with (clang refuses such a PCH) fail
the build with a message that names the target.
"""

load("//:copts.bzl", "COPTS", "TEST_COPTS")

# Each precompiled header of //base/pch and the copts it is built with.
PCH_COPTS = {
    "lib": COPTS,
    "test": TEST_COPTS,
    "grpc": COPTS,
    "grpc_test": TEST_COPTS,
}

def _with_pch(rule, kwargs):
    target = "//%s:%s" % (native.package_name(), kwargs.get("name"))
    if "pch" not in kwargs:
        fail("%s (%s): name its precompiled header: pch = one of %s, or pch = None" %
             (target, rule, sorted(PCH_COPTS.keys())))
    pch = kwargs.pop("pch")
    if pch == None:
        return kwargs
    if pch not in PCH_COPTS:
        fail("%s (%s): unknown pch %r: one of %s, or None" %
             (target, rule, pch, sorted(PCH_COPTS.keys())))
    copts = kwargs.get("copts", [])
    if copts != PCH_COPTS[pch]:
        fail("%s (%s): copts %r are not those pch %r is built with (%r): clang refuses the PCH; " %
             (target, rule, copts, pch, PCH_COPTS[pch]) +
             "use those copts, or pch = None")
    label = "//base/pch:" + pch
    kwargs["copts"] = copts + select({
        # No PCH under -c opt (pch.bzl says why): tools/package.sh.
        "//base/pch:opt": [],
        "//conditions:default": ["-include-pch", "$(execpath %s)" % label],
    })
    kwargs["deps"] = kwargs.get("deps", []) + [label]
    return kwargs

def cc_library(**kwargs):
    native.cc_library(**_with_pch("cc_library", kwargs))

def cc_test(**kwargs):
    native.cc_test(**_with_pch("cc_test", kwargs))

def cc_binary(**kwargs):
    native.cc_binary(**_with_pch("cc_binary", kwargs))
