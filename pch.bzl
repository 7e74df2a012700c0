"""Precompiled headers for runreaper's own code (docs/CONTRIBUTING.md "Build").

A `precompiled_header` is the prefix header's PCH built by the C++ toolchain
with exactly the flags of the configuration it is built in (--copt, --cxxopt,
the toolchain's features) plus the rule's `copts`, which must be the copts of
the targets that use it: clang refuses a PCH whose language options or macros
differ from the translation unit's (an error, never a silent mismatch). Its
CcInfo carries the .pch, the prefix header and the headers of `deps` as
declared headers (no linking), so every compile that names the PCH has it as
an input and every header the PCH holds is declared.
"""

load("//:cc_command.bzl", "cc_compile_command")

def _precompiled_header_impl(ctx):
    deps = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    dctx = deps.compilation_context
    if ctx.var["COMPILATION_MODE"] == "opt":
        # -c opt compiles binaries without -fPIC and libraries with or
        # without it as their consumers need, and clang refuses a PCH whose
        # PIC/PIE level differs from the file's: no PCH (//:cc.bzl adds no
        # -include-pch there either). Every other mode compiles PIC only.
        return [CcInfo(compilation_context = dctx), DefaultInfo()]
    pch = ctx.actions.declare_file(ctx.label.name + ".pch")
    cmd = cc_compile_command(ctx, dctx, ctx.attr.copts, ctx.file.hdr, pch)
    ctx.actions.run(
        executable = cmd.compiler,
        # The header as a C++ header; templates instantiated once here rather
        # than in every translation unit. No input mtimes in the PCH: Bazel
        # rebuilds it when a header's content changes, and a new checkout or
        # a touched lib.h with the same content must not fail every compile
        # with "has been modified since the precompiled header was built".
        arguments = ["-x", "c++-header", "-fpch-instantiate-templates", "-Xclang", "-fno-pch-timestamp"] + cmd.arguments,
        env = cmd.env,
        inputs = depset([ctx.file.hdr] + ctx.files.textual_hdrs, transitive = [dctx.headers, cmd.toolchain_files]),
        outputs = [pch],
        mnemonic = "CppPrecompiledHeader",
        progress_message = "Precompiling %s" % ctx.file.hdr.short_path,
    )
    own = cc_common.create_compilation_context(headers = depset([ctx.file.hdr, pch] + ctx.files.textual_hdrs))
    merged = cc_common.merge_cc_infos(
        direct_cc_infos = [CcInfo(compilation_context = own)],
        cc_infos = [CcInfo(compilation_context = dctx)],
    )
    return [
        CcInfo(compilation_context = merged.compilation_context),
        # The .pch, for //:cc.bzl's `-include-pch $(execpath <this label>)`.
        DefaultInfo(files = depset([pch])),
    ]

precompiled_header = rule(
    implementation = _precompiled_header_impl,
    attrs = {
        "hdr": attr.label(allow_single_file = [".h"], mandatory = True),
        # Headers of the tree the prefix header includes.
        "textual_hdrs": attr.label_list(allow_files = [".h"]),
        "copts": attr.string_list(),
        "deps": attr.label_list(providers = [CcInfo]),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)
