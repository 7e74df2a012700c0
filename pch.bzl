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

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "CPP_COMPILE_ACTION_NAME")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _precompiled_header_impl(ctx):
    deps = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    dctx = deps.compilation_context
    if ctx.var["COMPILATION_MODE"] == "opt":
        # -c opt compiles binaries without -fPIC and libraries with or
        # without it as their consumers need, and clang refuses a PCH whose
        # PIC/PIE level differs from the file's: no PCH (//:cc.bzl adds no
        # -include-pch there either). Every other mode compiles PIC only.
        return [CcInfo(compilation_context = dctx)]
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    pch = ctx.actions.declare_file(ctx.label.name + ".pch")
    variables = cc_common.create_compile_variables(
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts + ctx.attr.copts,
        source_file = ctx.file.hdr.path,
        output_file = pch.path,
        include_directories = dctx.includes,
        quote_include_directories = depset(
            [".", ctx.bin_dir.path, ctx.genfiles_dir.path],
            transitive = [dctx.quote_includes],
        ),
        system_include_directories = dctx.system_includes,
        preprocessor_defines = dctx.defines,
        use_pic = True,
    )
    command = cc_common.get_memory_inefficient_command_line(
        feature_configuration = features,
        action_name = CPP_COMPILE_ACTION_NAME,
        variables = variables,
    )
    compiler = cc_common.get_tool_for_action(
        feature_configuration = features,
        action_name = CPP_COMPILE_ACTION_NAME,
    )
    ctx.actions.run(
        executable = compiler,
        # The header as a C++ header; templates instantiated once here rather
        # than in every translation unit. No input mtimes in the PCH: Bazel
        # rebuilds it when a header's content changes, and a new checkout or
        # a touched lib.h with the same content must not fail every compile
        # with "has been modified since the precompiled header was built".
        arguments = ["-x", "c++-header", "-fpch-instantiate-templates", "-Xclang", "-fno-pch-timestamp"] + command,
        env = cc_common.get_environment_variables(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
            variables = variables,
        ),
        inputs = depset([ctx.file.hdr] + ctx.files.textual_hdrs, transitive = [dctx.headers, cc_toolchain.all_files]),
        outputs = [pch],
        mnemonic = "CppPrecompiledHeader",
        progress_message = "Precompiling %s" % ctx.file.hdr.short_path,
    )
    own = cc_common.create_compilation_context(headers = depset([ctx.file.hdr, pch] + ctx.files.textual_hdrs))
    merged = cc_common.merge_cc_infos(
        direct_cc_infos = [CcInfo(compilation_context = own)],
        cc_infos = [CcInfo(compilation_context = dctx)],
    )
    return [CcInfo(compilation_context = merged.compilation_context)]

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
